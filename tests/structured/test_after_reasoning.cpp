// Structured output held back through a reasoning model's <think> block
// (runtime/structured/after_reasoning.hpp): where the prompt leaves the reasoning, free text until
// </think>, the answer's grammar after it, and Qwen3's choice between thinking and answering.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "runtime/structured/after_reasoning.hpp"
#include "runtime/structured/grammar.hpp"
#include "runtime/structured/token_grammar.hpp"
#include "tests/support/token_masks.hpp"

using namespace kiln;
using kiln::test::allowed_tokens;

namespace {

// id 0 is special (an end of turn); <think> 4 and </think> 5 are one token each.
const std::vector<std::string> kThinkPieces = {"<|im_end|>", "{", "}", "x", "<think>", "</think>", "\n", "ab"};
constexpr ThinkTokens kThink{4, 5};
constexpr int32_t kVocab = 70;  // model rows past the tokenizer's 8, and past one mask word

std::shared_ptr<const TokenConstraint> braces() {
  auto vocab = std::make_shared<const VocabTrie>(
      static_cast<int32_t>(kThinkPieces.size()), [](int32_t id) { return kThinkPieces[id]; },
      [](int32_t id) { return id == 0; });
  return TokenGrammar::make(Grammar::parse(R"(root ::= "{" "x"* "}")"), vocab);
}

std::vector<int32_t> everything() {
  std::vector<int32_t> all;
  for (int32_t t = 0; t < kVocab; ++t) all.push_back(t);
  return all;
}

}  // namespace

TEST_CASE("after reasoning: the prompt's last turn says where the reasoning stands") {
  const std::vector<int32_t> ends = {0};
  const auto start = [&](std::vector<int32_t> prompt, ReasoningStart fallback) {
    return reasoning_start(prompt, kThink, ends, fallback);
  };
  CHECK(start({3, 0, 7, 4, 6}, ReasoningStart::may_open) == ReasoningStart::open);    // DeepSeek-R1's template
  CHECK(start({3, 0, 7, 4, 6, 5, 6}, ReasoningStart::open) == ReasoningStart::ended);  // Qwen3, enable_thinking false
  // An earlier turn's block does not count: the last turn holds neither tag.
  CHECK(start({4, 3, 5, 0, 7}, ReasoningStart::may_open) == ReasoningStart::may_open);
  CHECK(start({4, 3, 5, 0, 7}, ReasoningStart::open) == ReasoningStart::open);
  CHECK(start({}, ReasoningStart::may_open) == ReasoningStart::may_open);
}

TEST_CASE("after reasoning: free text through </think>, then the answer's grammar") {
  const auto answer = braces();
  CHECK(after_reasoning(answer, kThink, ReasoningStart::ended) == answer);
  CHECK(after_reasoning(answer, ThinkTokens{4, -1}, ReasoningStart::open) == answer);  // no single </think>
  auto s = after_reasoning(answer, kThink, ReasoningStart::open)->start();
  bool can_end = false;
  for (int32_t t : {3, 2, 4, 6, 0}) {  // any text, <think> again, even the end of turn: not the answer yet
    CHECK(allowed_tokens(*s, kVocab, can_end) == everything());
    CHECK(can_end);  // a thought cut short ends without an answer
    s->accept(t);
  }
  s->accept(5);  // </think>
  CHECK(allowed_tokens(*s, kVocab, can_end) == std::vector<int32_t>{1});  // "{" only
  CHECK_FALSE(can_end);
  s->accept(1);
  s->accept(3);
  CHECK(allowed_tokens(*s, kVocab, can_end) == std::vector<int32_t>{2, 3});
  s->accept(2);
  CHECK(allowed_tokens(*s, kVocab, can_end).empty());
  CHECK(can_end);
}

TEST_CASE("after reasoning: where the model may open <think>, its first token is <think> or the answer's") {
  const auto constraint = after_reasoning(braces(), kThink, ReasoningStart::may_open);
  bool can_end = true;
  auto thinks = constraint->start();
  CHECK(allowed_tokens(*thinks, kVocab, can_end) == std::vector<int32_t>{1, 4});
  CHECK_FALSE(can_end);
  thinks->accept(4);
  CHECK(allowed_tokens(*thinks, kVocab, can_end) == everything());
  thinks->accept(7);
  thinks->accept(5);
  CHECK(allowed_tokens(*thinks, kVocab, can_end) == std::vector<int32_t>{1});
  // Answering at once: the answer has begun, and <think> is text it may not hold.
  auto answers = constraint->start();
  answers->accept(1);
  CHECK(allowed_tokens(*answers, kVocab, can_end) == std::vector<int32_t>{2, 3});
}
