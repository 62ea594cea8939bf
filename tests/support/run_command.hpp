// Runs a command line through the shell, for the tests of command-line programs (tests/cli,
// tests/tokenizer). Header-only, so a test target needs no extra library to use it.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace kiln::test {

struct CommandResult {
  int exit_code = -1;  // -1 when the command did not exit normally (killed by a signal)
  std::string output;  // stdout and stderr together
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

}  // namespace kiln::test
