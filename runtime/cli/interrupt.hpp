// Ctrl-C (SIGINT) and SIGTERM during a run: the first one asks the run to stop after the step in
// progress, so every result finished so far is still written (as whole JSONL lines) and the run
// ends with a summary and exit code 128 + the signal; a second one ends the process at once, as
// the default action would.
#pragma once

namespace kiln {

class InterruptCatcher {
 public:
  InterruptCatcher();   // installs the handlers
  ~InterruptCatcher();  // restores the previous ones
  InterruptCatcher(const InterruptCatcher&) = delete;
  InterruptCatcher& operator=(const InterruptCatcher&) = delete;

  // The signal caught (SIGINT or SIGTERM), or 0.
  static int caught();
};

}  // namespace kiln
