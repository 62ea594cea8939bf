// A reasoning model's <think> block split from its answer (runtime/server/reasoning_parser.hpp):
// whole answers, and the parts a stream may send so far; and a chat request's structured output
// starting after the block (runtime/structured/after_reasoning.hpp) as the server sets it up.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/server/openai_api.hpp"
#include "runtime/server/reasoning_parser.hpp"
#include "tests/support/chatml_api_model.hpp"
#include "tests/support/chatml_tokenizer.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/token_masks.hpp"

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

// A ChatML template with Qwen3's switch: enable_thinking false writes an empty block into the prompt.
TEST_CASE("a chat request's structured output starts after the reasoning, as the prompt and the parser say") {
  test::TempDir dir("kiln-reasoning");
  const Tokenizer tokenizer =
      Tokenizer::from_tokenizer_json(dir.write("tokenizer.json", test::chatml_tokenizer_json().dump()));
  const JinjaChatTemplate chat_template(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n"
      "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}",
      "", "<|endoftext|>", "a test template");
  StructuredOutputs structured(tokenizer);
  const auto qwen3 = ReasoningParser::make("qwen3");
  const auto r1 = ReasoningParser::make("deepseek_r1");
  ApiModel m = test::chatml_api_model(tokenizer, chat_template, &structured, 256);
  m.think_tokens = ThinkTokens{tokenizer.token_id("<think>"), tokenizer.token_id("</think>")};
  REQUIRE(m.think_tokens.open == 259);
  REQUIRE(m.think_tokens.close == 260);
  // The first token's choices for a request, under a parser (or none).
  const auto first_tokens = [&](const ReasoningParser* parser, bool thinking) {
    m.reasoning_parser = parser;
    nlohmann::json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                           {"guided_choice", {"yes", "no"}},
                           {"chat_template_kwargs", {{"enable_thinking", thinking}}}};
    const ApiRequest r = parse_chat_request(body, m);
    REQUIRE(r.params.constraint);
    bool can_end = false;
    return test::allowed_tokens(*r.params.constraint->start(), m.vocab_size, can_end);
  };
  const std::vector<int32_t> answer = {'n', 'y'};
  CHECK(first_tokens(nullptr, true) == answer);
  CHECK(first_tokens(qwen3.get(), true) == std::vector<int32_t>{'n', 'y', 259});  // or it thinks first
  CHECK(first_tokens(qwen3.get(), false) == answer);  // the prompt closed the block
  CHECK(first_tokens(r1.get(), true).size() == static_cast<size_t>(m.vocab_size));  // thinking: free text
  CHECK(first_tokens(r1.get(), false) == answer);
}
