// Runs a command line through the shell, for the tests of command-line programs (tests/cli,
// tests/tokenizer, tests/hardening). Header-only, so a test target needs no extra library to use it.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace kiln::test {

struct CommandResult {
  int exit_code = -1;  // -1 when the command did not exit normally (killed by a signal)
  std::string output;  // stdout and stderr together
  int signal = 0;      // the signal that ended the command, if one did (run_command_limited)
  bool timed_out = false;  // run_command_limited killed it at its deadline
};

// `command` runs under /bin/sh with stderr redirected into stdout.
inline CommandResult run_command(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed: " + command);
  CommandResult result;
  char buffer[4096];
  while (const size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// As run_command, but a hang is a result, not a stuck test: after `timeout_seconds` the command's
// whole process group is killed (timed_out). `signal` tells a crash (SIGSEGV, SIGABRT) from an
// exit. The shell execs the command, so its signal is the program's own.
inline CommandResult run_command_limited(const std::string& command, double timeout_seconds) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed: " + command);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed: " + command);
  if (pid == 0) {
    setpgid(0, 0);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    const std::string line = "exec " + command;
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);
  close(fds[1]);
  CommandResult result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = read(fds[0], buffer, sizeof buffer);
    if (n <= 0) break;  // end of output: the command (and whatever held the pipe) is gone
    result.output.append(buffer, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  if (!result.timed_out) {
    // Output closed; the process may still be exiting. Wait for it under the same deadline.
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        result.timed_out = true;
        kill(-pid, SIGKILL);
        break;
      }
      usleep(1000);
    }
    if (!result.timed_out) {
      result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      return result;
    }
  }
  waitpid(pid, &status, 0);
  result.signal = SIGKILL;
  return result;
}

}  // namespace kiln::test
