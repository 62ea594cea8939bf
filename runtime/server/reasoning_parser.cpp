#include "runtime/server/reasoning_parser.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"
#include "runtime/server/partial_tag.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace kiln {
namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

// Past the white space from `at` on.
size_t skip_space(std::string_view text, size_t at) {
  return text.size() - utf8::trim_white_space(text.substr(at), true, false).size();
}

class ThinkParser : public ReasoningParser {
 public:
  explicit ThinkParser(bool opened_in_prompt) : opened_(opened_in_prompt) {}

  Split split(std::string_view text, bool final) const override {
    Split s;
    const size_t first = skip_space(text, 0);
    const std::string_view head = text.substr(first);
    size_t begin = 0;
    if (head.substr(0, kOpen.size()) == kOpen) {
      begin = first + kOpen.size();
    } else if (!final && head.size() < kOpen.size() && kOpen.substr(0, head.size()) == head) {
      return s;  // "<thi": may still open a block; nothing settled
    } else if (!opened_) {
      s.content_begin = 0;  // no thinking: all content
      return s;
    }
    s.reasoning_begin = begin;
    const size_t close = text.find(kClose, begin);
    if (close == std::string_view::npos) {
      s.reasoning_end = final ? text.size() : text.size() - partial_tag(text.substr(begin), kClose);
      return s;
    }
    s.reasoning_end = close;
    const size_t after = skip_space(text, close + kClose.size());
    // Streaming: whitespace right after </think> is held until the content's first other byte.
    if (final || after < text.size()) s.content_begin = after;
    return s;
  }

  bool opened_by_template() const override { return opened_; }

 private:
  bool opened_;
};

}  // namespace

std::unique_ptr<ReasoningParser> ReasoningParser::make(const std::string& name) {
  if (name == "qwen3") return std::make_unique<ThinkParser>(false);
  if (name == "deepseek_r1") return std::make_unique<ThinkParser>(true);
  fail("reasoning parser '", name, "' is not one of qwen3, deepseek_r1");
}

}  // namespace kiln
