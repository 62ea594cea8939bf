// Structured output that starts after a reasoning model's thinking (vLLM's behaviour with a
// --reasoning-parser): the <think> block is free text, and the schema, grammar or choices constrain
// the answer after </think>. Without this, a JSON schema would force the answer's first token to be
// JSON and the model could never think.
//
// Token level: <think> and </think> must each be one token of the vocabulary (Qwen3's and
// DeepSeek-R1's are); where they are not, the server constrains from the first token as before.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "runtime/serving/token_constraint.hpp"

namespace kiln {

struct ThinkTokens {
  int32_t open = -1, close = -1;  // <think>, </think>
  bool found() const { return open >= 0 && close >= 0; }
};

// Where the answer's first token stands.
enum class ReasoningStart {
  may_open,  // the model may open <think> (Qwen3): its first token is <think> or the answer's
  open,      // the prompt opened <think> (DeepSeek-R1's template): free text until </think>
  ended,     // the prompt closed it (Qwen3 with enable_thinking false): the answer from the first token
};

// From the prompt's last turn (the tokens after its last end-of-turn token: earlier turns' blocks
// do not count): the last <think> or </think> there, or `fallback` when it holds neither.
ReasoningStart reasoning_start(std::span<const int32_t> prompt, const ThinkTokens& think,
                               std::span<const int32_t> turn_ends, ReasoningStart fallback);

// `answer` applied after the reasoning. Until </think> every token is allowed and the text may end
// (a thought cut short by max_tokens or EOS has no answer); at may_open, the answer's first tokens
// and <think>.
std::shared_ptr<const TokenConstraint> after_reasoning(std::shared_ptr<const TokenConstraint> answer,
                                                       const ThinkTokens& think, ReasoningStart start);

}  // namespace kiln
