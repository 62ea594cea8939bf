// Tool calls in a chat answer's text, in the model's own format (vLLM's --tool-call-parser): with
// tool_choice "auto" the model decides whether to call, and writes the call as its chat template
// taught it. The server turns what parses into tool_calls and leaves the rest as content.
//   hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one block a call (Qwen2.5,
//                Qwen3, Hermes); a block may hold a list of calls (SmolLM2's template).
//   llama3_json  {"name": ..., "parameters": {...}} as the whole answer, several separated by ";"
//                (Llama 3.1 / 3.2's JSON tool calling; <|python_tag|> before it is dropped).
//   pythonic     [get_weather(city="Paris"), now()] as the whole answer (Llama 3.2's and Llama 4's
//                pythonic templates; pythonic_calls.hpp).
// Text that looks like a call but does not parse stays content, as vLLM leaves it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln {

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text (an object)
};

struct ParsedAnswer {
  std::string content;          // the text that is not a call (may be empty)
  std::vector<ToolCall> calls;  // empty: no call
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  virtual ParsedAnswer parse(std::string_view text) const = 0;
  // Streaming: how much of `text` (the answer so far) is content whatever comes next: the bytes
  // before anything that is, or may grow into, the start of a call.
  virtual size_t settled_content(std::string_view text) const = 0;

  // "hermes", "llama3_json" or "pythonic"; throws kiln::Error naming the choices for any other name.
  static std::unique_ptr<ToolCallParser> make(const std::string& name);
};

}  // namespace kiln
