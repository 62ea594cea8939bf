#include "runtime/cli/interrupt.hpp"

#include <signal.h>

namespace kiln {
namespace {

volatile sig_atomic_t g_caught = 0;
struct sigaction g_previous_int, g_previous_term;

void on_signal(int signo) {
  if (g_caught != 0) {
    // The second signal: no more waiting for the step to end.
    signal(signo, SIG_DFL);
    raise(signo);
    return;
  }
  g_caught = signo;
}

}  // namespace

InterruptCatcher::InterruptCatcher() {
  g_caught = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // reads and writes in progress carry on
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
}

InterruptCatcher::~InterruptCatcher() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
}

int InterruptCatcher::caught() { return g_caught; }

}  // namespace kiln
