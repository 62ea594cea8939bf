// A reasoning model's <think> block split from its answer (runtime/server/reasoning_parser.hpp):
// whole answers, and the parts a stream may send so far.
#include <catch2/catch.hpp>

#include <string>

#include "runtime/core/error.hpp"
#include "runtime/server/reasoning_parser.hpp"

using namespace kiln;

namespace {

struct Parts {
  std::string reasoning, content;
  bool reasoning_ended;
};
Parts parts(const ReasoningParser& p, const std::string& text, bool final) {
  const ReasoningParser::Split s = p.split(text, final);
  return {text.substr(s.reasoning_begin, s.reasoning_end - s.reasoning_begin),
          s.content_begin == std::string::npos ? "" : text.substr(s.content_begin), s.content_begin != std::string::npos};
}

}  // namespace

TEST_CASE("reasoning parser qwen3: a leading <think> block is the reasoning, the rest the answer") {
  const auto p = ReasoningParser::make("qwen3");
  Parts a = parts(*p, "<think>\nLet me see.\n</think>\n\nParis.", true);
  CHECK(a.reasoning == "\nLet me see.\n");
  CHECK(a.content == "Paris.");
  a = parts(*p, "Paris, no thinking.", true);  // enable_thinking false: all content
  CHECK(a.reasoning.empty());
  CHECK(a.content == "Paris, no thinking.");
  a = parts(*p, "<think>cut off by max_tokens", true);
  CHECK(a.reasoning == "cut off by max_tokens");
  CHECK_FALSE(a.reasoning_ended);
  a = parts(*p, "<thi", true);  // whole: no block after all
  CHECK(a.content == "<thi");
  // Streaming: nothing settles while "<thi" may open a block or "</thi" may close it.
  CHECK(parts(*p, "<thi", false).content.empty());
  CHECK_FALSE(parts(*p, "<thi", false).reasoning_ended);
  a = parts(*p, "<think>abc</thi", false);
  CHECK(a.reasoning == "abc");
  CHECK_FALSE(a.reasoning_ended);
  a = parts(*p, "<think>abc</think>\n", false);  // whitespace after the block waits for the answer
  CHECK(a.reasoning == "abc");
  CHECK_FALSE(a.reasoning_ended);
  a = parts(*p, "<think>abc</think>\nX", false);
  CHECK(a.content == "X");
  CHECK(parts(*p, "Hel", false).content == "Hel");
}

TEST_CASE("reasoning parser deepseek_r1: everything up to </think> is reasoning") {
  const auto p = ReasoningParser::make("deepseek_r1");
  Parts a = parts(*p, "Hmm, 2 + 2.\n</think>\n\n4", true);
  CHECK(a.reasoning == "Hmm, 2 + 2.\n");
  CHECK(a.content == "4");
  a = parts(*p, "<think>again</think>4", true);  // a <think> the model writes again is dropped
  CHECK(a.reasoning == "again");
  CHECK(a.content == "4");
  a = parts(*p, "still thinking", true);
  CHECK(a.reasoning == "still thinking");
  CHECK_FALSE(a.reasoning_ended);
  CHECK_THROWS_WITH(ReasoningParser::make("granite"), Catch::Contains("'granite'") && Catch::Contains("qwen3"));
}
