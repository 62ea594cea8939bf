// A constraint on the tokens a sequence may generate (structured output: a JSON schema, a grammar,
// a list of choices). The scheduler asks the sequence's state before each sample which tokens to
// ban (they become LogitEdit::banned, so the CPU and CUDA samplers honour them alike) and tells it
// each token sampled. The model-independent half: runtime/structured implements it over the
// tokenizer's vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace kiln {

class TokenConstraintState {
 public:
  virtual ~TokenConstraintState() = default;
  // The tokens in [0, vocab_size) (the model's vocabulary) the next sample may not be, ascending:
  // special tokens always, and ids the tokenizer does not have. And whether the text may end here:
  // the scheduler then lets the request's end tokens (EOS, its stop_token_ids) through. Never bans
  // every token without can_end.
  virtual void banned(int32_t vocab_size, std::vector<int32_t>& out, bool& can_end) = 0;
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
