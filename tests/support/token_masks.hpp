// A constraint state's allowed tokens as a list (tests and fuzz harnesses): its mask, read back.
// The mask starts poisoned (every bit set) so that a state that leaves a word unwritten shows, and
// bits past the vocabulary must come back cleared. Header-only.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/serving/sample_batch.hpp"
#include "runtime/serving/token_constraint.hpp"

namespace kiln::test {

// The ids in [0, vocab_size) the mask allows, ascending.
inline std::vector<int32_t> mask_tokens(std::span<const TokenMaskWord> mask, int32_t vocab_size) {
  std::vector<int32_t> out;
  for (int32_t t = 0; t < vocab_size; ++t) {
    if (token_allowed(mask.data(), t)) out.push_back(t);
  }
  return out;
}

// Throws kiln::Error when the state sets a bit past vocab_size.
inline std::vector<int32_t> allowed_tokens(TokenConstraintState& state, int32_t vocab_size, bool& can_end) {
  std::vector<TokenMaskWord> mask(static_cast<size_t>(token_mask_words(vocab_size)), ~TokenMaskWord{0});
  state.allowed(vocab_size, mask, can_end);
  if ((mask.back() & ~last_mask_word_bits(vocab_size)) != 0) {
    fail("constraint state: bits set past the vocabulary's ", vocab_size, " tokens");
  }
  return mask_tokens(mask, vocab_size);
}

}  // namespace kiln::test
