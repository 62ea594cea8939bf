// A constraint on the tokens a sequence may generate (structured output: a JSON schema, a grammar,
// a list of choices). Before each sample the sequence's state writes which tokens it allows as a
// bitmask (SampleBatch::masks: the CPU and CUDA samplers read the same one) and it hears each token
// sampled. A mask is vocab / 8 bytes whatever it allows, where a list of bans was up to 28 bytes a
// token (1.6 MB a row inside a JSON string of a 128K vocabulary, copied to the GPU every step).
// The model-independent half: runtime/structured implements it over the tokenizer's vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace kiln {

// A bitmask over token ids: bit t % 64 of word t / 64 is token t.
using TokenMaskWord = uint64_t;
constexpr int32_t token_mask_words(int32_t vocab_size) { return (vocab_size + 63) / 64; }
// The bits of a mask's last word that are tokens of the vocabulary (the rest must stay clear).
constexpr TokenMaskWord last_mask_word_bits(int32_t vocab_size) {
  return vocab_size % 64 == 0 ? ~TokenMaskWord{0} : (TokenMaskWord{1} << (vocab_size % 64)) - 1;
}

class TokenConstraintState {
 public:
  virtual ~TokenConstraintState() = default;
  // Writes `mask` (token_mask_words(vocab_size) words, vocab_size being the model's): the bits of
  // the tokens the next sample may be set, every other bit cleared (special tokens, ids the
  // tokenizer does not have, bits past vocab_size). And whether the text may end here: the
  // scheduler then lets the request's end tokens (EOS, its stop_token_ids) through. Never allows
  // nothing without can_end.
  virtual void allowed(int32_t vocab_size, std::span<TokenMaskWord> mask, bool& can_end) = 0;
  // The token sampled (not an end token).
  virtual void accept(int32_t token) = 0;
};

// Immutable, shared by every sequence that uses it (a request's n choices, the same schema sent
// again); each sequence runs its own state.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual std::unique_ptr<TokenConstraintState> start() const = 0;
};

}  // namespace kiln
