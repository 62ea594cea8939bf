// kiln::Error — the one exception type for bad input and failed invariants.
// Messages name the file, field or value and what was expected; main() prints them on one line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// fail("tensor ", name, ": expected shape ", shape) — builds the message from its parts and throws.
template <typename... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  std::ostringstream message;
  (message << ... << std::forward<Parts>(parts));
  throw Error(message.str());
}

}  // namespace kiln
