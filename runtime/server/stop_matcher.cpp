#include "runtime/server/stop_matcher.hpp"

#include "runtime/core/error.hpp"

namespace kiln {

StopMatcher::StopMatcher(std::string stop) : stop_(std::move(stop)), border_(stop_.size(), 0) {
  if (stop_.empty()) fail("a stop string is empty");
  for (size_t i = 1, k = 0; i < stop_.size(); ++i) {
    while (k > 0 && stop_[i] != stop_[k]) k = border_[k - 1];
    if (stop_[i] == stop_[k]) ++k;
    border_[i] = static_cast<uint32_t>(k);
  }
}

bool StopMatcher::push(char c) {
  if (state_ == stop_.size()) state_ = border_[state_ - 1];  // past a whole match: its longest border
  while (state_ > 0 && stop_[state_] != c) state_ = border_[state_ - 1];
  if (stop_[state_] == c) ++state_;
  return state_ == stop_.size();
}

}  // namespace kiln
