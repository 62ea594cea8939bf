// libFuzzer: a model's chat answer through the server's answer parsers (runtime/server): the tool
// call parsers (hermes, llama3_json, pythonic: the last reads Python literals) and the reasoning
// parsers (qwen3, deepseek_r1), whole and as a stream would ask for every prefix. A model writes
// anything, so nothing may throw or crash. Checked too: every call's arguments are a JSON object;
// a stream never takes back content or reasoning it settled (the settled lengths only grow, and
// never past the text); the reasoning and content spans lie inside the text.
// Input: one byte of options (bits 0-1: 0 hermes, 1 llama3_json, 2 pythonic, 3 none; bit 2: the
// reasoning parser deepseek_r1, else qwen3), then the answer (UTF-8, as the detokenizer writes it).
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/core/strict_json.hpp"
#include "runtime/server/reasoning_parser.hpp"
#include "runtime/server/tool_parser.hpp"
#include "runtime/tokenizer/utf8.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {

const kiln::ToolCallParser* tool_parser(uint8_t options) {
  static const auto hermes = kiln::ToolCallParser::make("hermes");
  static const auto llama3 = kiln::ToolCallParser::make("llama3_json");
  static const auto pythonic = kiln::ToolCallParser::make("pythonic");
  const kiln::ToolCallParser* parsers[] = {hermes.get(), llama3.get(), pythonic.get(), nullptr};
  return parsers[options & 3];
}

void check_split(const kiln::ReasoningParser::Split& s, size_t size) {
  if (s.reasoning_begin > s.reasoning_end || s.reasoning_end > size) __builtin_trap();
  if (s.content_begin != std::string_view::npos && s.content_begin > size) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text = kiln::fuzz::as_text(data + 1, size - 1);
  if (!kiln::utf8::is_valid(text)) return 0;  // the server's text is always UTF-8
  static const auto qwen3 = kiln::ReasoningParser::make("qwen3");
  static const auto r1 = kiln::ReasoningParser::make("deepseek_r1");
  const kiln::ReasoningParser& reasoning = data[0] & 4 ? *r1 : *qwen3;
  const kiln::ToolCallParser* tools = tool_parser(data[0]);

  check_split(reasoning.split(text, true), text.size());
  if (tools) {
    for (const kiln::ToolCall& c : tools->parse(text).calls) {
      try {
        if (!kiln::parse_json_strict(c.arguments, "arguments").is_object()) __builtin_trap();
      } catch (const kiln::Error&) {
        __builtin_trap();  // arguments that are not JSON
      }
    }
  }
  // A stream's view of each prefix (the first 512, so one input stays fast) that ends between
  // characters: the streamed text holds a character's first bytes back until it is whole
  // (StreamDecoder), so the server never parses a prefix that cuts one.
  size_t settled = 0, thought = 0;
  for (size_t n = 0; n <= std::min<size_t>(text.size(), 512); ++n) {
    if (n < text.size() && kiln::utf8::is_continuation(text[n])) continue;
    const std::string_view prefix = text.substr(0, n);
    const kiln::ReasoningParser::Split s = reasoning.split(prefix, false);
    check_split(s, n);
    if (s.reasoning_end < thought && s.content_begin == std::string_view::npos) __builtin_trap();
    thought = std::max(thought, s.reasoning_end);
    if (tools) {
      const size_t now = tools->settled_content(prefix);
      if (now > n || now < settled) __builtin_trap();
      settled = now;
    }
  }
  return 0;
}
