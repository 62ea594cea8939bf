// A reasoning model's thinking, split from its answer (vLLM's --reasoning-parser): chat answers
// come back with the text inside <think>...</think> as `reasoning_content` and the rest as content.
//   qwen3        <think> opens the answer when the model thinks (Qwen3; with enable_thinking false
//                the template writes an empty block into the prompt and the answer is all content).
//   deepseek_r1  the template opened <think> in the prompt: everything up to </think> is reasoning
//                (DeepSeek-R1 and its distillations; a <think> the model writes again is dropped).
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace kiln {

class ReasoningParser {
 public:
  virtual ~ReasoningParser() = default;

  struct Split {
    size_t reasoning_begin = 0, reasoning_end = 0;  // the reasoning: text[begin, end)
    size_t content_begin = std::string_view::npos;  // npos: still reasoning (or undecided)
  };
  // Where a whole answer's parts lie, or (streaming, `final` false) the parts settled so far: the
  // reasoning up to anything that may grow into </think>, the content once the reasoning ended.
  virtual Split split(std::string_view text, bool final) const = 0;
  // Whether the chat template opens the block in the prompt (deepseek_r1) rather than the model
  // (qwen3): where structured output starts when the prompt's last turn shows neither tag.
  virtual bool opened_by_template() const = 0;

  // "qwen3" or "deepseek_r1"; throws kiln::Error naming the choices for any other name.
  static std::unique_ptr<ReasoningParser> make(const std::string& name);
};

}  // namespace kiln
