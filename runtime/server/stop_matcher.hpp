// One stop string followed through text as it arrives (Knuth-Morris-Pratt): each byte costs O(1)
// amortized however long the stop string is, and the matcher always knows the longest prefix of
// the stop string that the text so far ends with, which is what OutputProcessor must hold back.
// Comparing the pending text's tails with the stop string instead costs O(length²) a token once
// a long prefix is held, on the engine thread, with the stop string and (through the prompt) the
// text both in a client's hands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

class StopMatcher {
 public:
  explicit StopMatcher(std::string stop);  // stop: not empty (SamplingParams::validate)

  // The next byte of the text; true when the stop string ends with it (then matched() == size()).
  bool push(char c);
  // How many bytes of the stop string the text so far ends with.
  size_t matched() const { return state_; }
  // Forgets the text so far (it was emitted without being looked at).
  void reset() { state_ = 0; }
  const std::string& stop() const { return stop_; }
  size_t size() const { return stop_.size(); }

 private:
  std::string stop_;
  // border_[i]: the length of the longest proper prefix of stop_[0, i] that is also its suffix.
  std::vector<uint32_t> border_;
  size_t state_ = 0;
};

}  // namespace kiln
