// Grammars over a vocabulary (runtime/structured/token_grammar.hpp): the trie walk's allowed tokens
// equal a token-by-token check of the grammar, along random paths; special tokens and ids past the
// tokenizer are always banned; a state with no way on lets the text end.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/serving/sample_batch.hpp"
#include "runtime/serving/scheduled_step.hpp"
#include "runtime/structured/grammar.hpp"
#include "runtime/structured/grammar_matcher.hpp"
#include "runtime/structured/json_schema_grammar.hpp"
#include "runtime/structured/token_grammar.hpp"
#include "runtime/tokenizer/tokenizer.hpp"
#include "tests/support/token_masks.hpp"

using namespace kiln;
using kiln::test::allowed_tokens;

namespace {

// Pieces of JSON as a BPE vocabulary might cut them, overlapping; id 0 is a special token, and one
// token decodes to nothing.
const std::vector<std::string> kPieces = {
    "<eos>", "{", "}", "{\"", "\":", "\"", "\",", ",", " ", "  ", "\n", "\n  ", "true", "false", "null", "tr", "ue",
    "1", "12", "-", "0", ".", "5e", "a", "ab", "abc", "\"a", "b\"", "\xC3", "\xA9", "\xC3\xA9", "\xE2\x82\xAC", "[", "]",
    "],", "\\", "\\n", "\\\"", "x", "name", "\"name", "\":\"", "", "}\n", "\"}", "ok"};

std::shared_ptr<const VocabTrie> vocab() {
  return std::make_shared<const VocabTrie>(
      static_cast<int32_t>(kPieces.size()), [](int32_t id) { return kPieces[id]; }, [](int32_t id) { return id == 0; });
}

}  // namespace

TEST_CASE("token grammar: the trie walk allows exactly the tokens the grammar takes, along random paths") {
  const std::string schema = R"({"type":"object","properties":{"name":{"type":"string"},"ok":{"type":"boolean"},"n":{"type":"array","items":{"type":"number"}}},"required":["name"]})";
  const Grammar grammar = Grammar::parse(json_schema_gbnf(nlohmann::ordered_json::parse(schema)));
  const auto g = TokenGrammar::make(grammar, vocab());
  const int32_t vocab_size = static_cast<int32_t>(kPieces.size()) + 5;  // the model has rows past the tokenizer
  std::mt19937 rng(3);
  int ended = 0;
  for (int path = 0; path < 40; ++path) {
    GrammarMatcher m(grammar);
    GrammarState state = m.start();
    auto constraint = g->start();
    for (int step = 0; step < 60; ++step) {
      bool can_end = false;
      const std::vector<int32_t> allowed = allowed_tokens(*constraint, vocab_size, can_end);
      std::vector<int32_t> takes;
      for (int32_t id = 0; id < vocab_size; ++id) {
        if (id < static_cast<int32_t>(kPieces.size()) && id != 0 && !kPieces[id].empty() &&
            !m.advance(state, kPieces[id]).dead()) {
          takes.push_back(id);
        }
      }
      INFO("path " << path << " step " << step);
      CHECK(allowed == takes);
      CHECK(can_end == (state.can_end() || allowed.empty()));
      if (allowed.empty() || (can_end && rng() % 3 == 0)) {
        ++ended;
        break;
      }
      const int32_t pick = allowed[rng() % allowed.size()];
      constraint->accept(pick);
      state = m.advance(state, kPieces[pick]);
    }
  }
  CHECK(ended > 0);
}

namespace {

// Long tokens around the lengths where a bounded repetition's counts start to matter, and the
// JSON and grammar pieces that close one repetition and open the next.
std::vector<std::string> bounded_pieces() {
  std::vector<std::string> p = {"<eos>", "{", "}", "[", "]", ",", ":", " ", "\"", "\",", "\":", "\":\"", "{\"s\":\"",
                                "\",\"t\":[\"", "\",\"", "\"]", "\"]}", "]}", "\"s\"", "\"t\"", "a\"", "aaaa\",\"", "ab",
                                "c", "abab", "ababab!", "!", "!x", "x", "y", "xy", "xyxyxy", "\xC3\xA9", "\xC3\xA9\xC3\xA9" "a"};
  for (int n : {1, 2, 3, 5, 8, 13, 16, 31, 32, 33, 40, 47}) {
    p.push_back(std::string(static_cast<size_t>(n), 'a'));
    p.push_back(std::string(static_cast<size_t>(n), 'a') + "\",\"");
    p.push_back(std::string(static_cast<size_t>(n / 2), 'c') + "ab");
    p.push_back("!" + std::string(static_cast<size_t>(n), 'x'));
  }
  return p;
}

// Along random paths, the allowed tokens equal a token-by-token check of the grammar.
void check_random_paths(const Grammar& grammar, const TokenGrammar& g, const std::vector<std::string>& pieces,
                        int paths, int steps, uint32_t seed) {
  const auto n = static_cast<int32_t>(pieces.size());
  std::mt19937 rng(seed);
  for (int path = 0; path < paths; ++path) {
    GrammarMatcher m(grammar);
    GrammarState state = m.start();
    auto constraint = g.start();
    for (int step = 0; step < steps; ++step) {
      bool can_end = false;
      const std::vector<int32_t> allowed = allowed_tokens(*constraint, n, can_end);
      std::vector<int32_t> takes;
      for (int32_t id = 1; id < n; ++id) {
        if (!pieces[id].empty() && !m.advance(state, pieces[id]).dead()) takes.push_back(id);
      }
      INFO("path " << path << " step " << step);
      REQUIRE(allowed == takes);
      CHECK(can_end == (state.can_end() || allowed.empty()));
      if (allowed.empty() || (can_end && rng() % 4 == 0)) break;
      const int32_t pick = allowed[rng() % allowed.size()];
      constraint->accept(pick);
      state = m.advance(state, pieces[pick]);
    }
  }
}

}  // namespace

TEST_CASE("token grammar: states that differ in a bounded repetition's count share masks, exactly") {
  const std::vector<std::string> pieces = bounded_pieces();
  const auto trie = std::make_shared<const VocabTrie>(
      static_cast<int32_t>(pieces.size()), [&](int32_t id) { return pieces[id]; }, [](int32_t id) { return id == 0; });
  const char* schema =
      R"({"type":"object","properties":{"s":{"type":"string","maxLength":45},"t":{"type":"array","items":{"type":"string","minLength":1,"maxLength":6},"maxItems":4}},"required":["s","t"]})";
  const char* gbnf = R"(root ::= ("ab" | "c"){2,40} "!" ([x-z] "y"?){0,50}
)";
  for (const std::string& text : {json_schema_gbnf(nlohmann::ordered_json::parse(schema)), std::string(gbnf)}) {
    INFO(text);
    const Grammar grammar = Grammar::parse(text);
    CHECK_FALSE(grammar.repetitions.empty());
    const auto g = TokenGrammar::make(grammar, trie);
    check_random_paths(grammar, *g, pieces, 60, 80, 11);
    CHECK(g->shared_masks() > 0);  // the paths went through states that shared
  }
}

TEST_CASE("token grammar: masks are cached per state and shared by sequences, and a dead state may end") {
  const Grammar grammar = Grammar::parse(R"(root ::= "{" "x"* "}")");
  const auto g = TokenGrammar::make(grammar, vocab());
  const int32_t n = static_cast<int32_t>(kPieces.size());
  auto a = g->start(), b = g->start();
  bool end_a = false, end_b = true;
  std::vector<int32_t> allowed_a = allowed_tokens(*a, n, end_a);
  CHECK(allowed_a == allowed_tokens(*b, n, end_b));
  CHECK(end_a == end_b);
  CHECK_FALSE(end_a);
  // "{" and "{\"": only the first fits.
  CHECK(allowed_a == std::vector<int32_t>{1});
  a->accept(1);  // "{"
  a->accept(38);  // "x"
  allowed_a = allowed_tokens(*a, n, end_a);
  CHECK_FALSE(end_a);
  CHECK(std::binary_search(allowed_a.begin(), allowed_a.end(), 2));  // "}"
  CHECK_FALSE(std::binary_search(allowed_a.begin(), allowed_a.end(), 43));  // "}\n": nothing may follow the "}"
  a->accept(2);  // "}"
  CHECK(allowed_tokens(*a, n, end_a).empty());  // nothing more: only the end tokens (the caller's)
  CHECK(end_a);
  // A token the grammar cannot take (a sampler bug, a bad replay) leaves a dead state: it may end.
  b->accept(2);  // "}" first
  CHECK(allowed_tokens(*b, n, end_b).empty());
  CHECK(end_b);
}

TEST_CASE("token grammar: a batch's masks, computed at once, equal each computed alone") {
  const std::string schema = R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"array","items":{"type":"number"}}}})";
  const auto g = TokenGrammar::make(Grammar::parse(json_schema_gbnf(nlohmann::ordered_json::parse(schema))), vocab());
  const int32_t vocab_size = static_cast<int32_t>(kPieces.size()) + 5;
  // 24 sequences, each a different number of steps into its own answer.
  std::mt19937 rng(9);
  std::vector<std::unique_ptr<TokenConstraintState>> states, twins;
  for (int i = 0; i < 24; ++i) {
    states.push_back(g->start());
    twins.push_back(g->start());
    for (int step = 0; step < i % 9; ++step) {
      bool can_end = false;
      const std::vector<int32_t> allowed = allowed_tokens(*states.back(), vocab_size, can_end);
      if (allowed.empty()) break;
      const int32_t pick = allowed[rng() % allowed.size()];
      states.back()->accept(pick);
      twins.back()->accept(pick);
    }
  }
  std::vector<ScheduledSeq> seqs(states.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].samples = i % 5 != 4;  // some rows do not sample
    seqs[i].constraint = states[i].get();
    seqs[i].end_tokens = {0};
  }
  const SampleBatch batch = sample_batch(seqs, vocab_size);
  size_t row = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i].samples) continue;
    std::vector<TokenMaskWord> alone(static_cast<size_t>(token_mask_words(vocab_size)));
    constraint_mask(*twins[i], vocab_size, seqs[i].end_tokens, alone);
    const std::span<const TokenMaskWord> got = batch.row_mask(row++, vocab_size);
    INFO("sequence " << i);
    CHECK(std::vector<TokenMaskWord>(got.begin(), got.end()) == alone);
  }
  CHECK(row == batch.rows.size());
}

TEST_CASE("token grammar: a grammar that begins in more ways than the matcher follows is refused") {
  std::string wide = "root ::= \"x0\"";
  for (int i = 1; i < 5000; ++i) wide += " | \"x" + std::to_string(i) + "\"";
  CHECK_THROWS_WITH(TokenGrammar::make(Grammar::parse(wide + "\n"), vocab()), Catch::Contains("begins in more ways"));
}

TEST_CASE("token grammar: a grammar whose start matches nothing within the limits is refused") {
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 5000; ++i) chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  chain += "r5000 ::= \"x\"\n";
  CHECK_THROWS_WITH(TokenGrammar::make(Grammar::parse(chain), vocab()), Catch::Contains("matches nothing within"));
}

TEST_CASE("token grammar: a grammar too ambiguous to follow over a large vocabulary is refused up front") {
  // Every four-letter word, and 300 runs of letters in a row: after "ab" any of the 300 runs may
  // hold each letter, so the first mask's walk steps some 300 stacks at each of 475K trie nodes.
  std::vector<std::string> words;
  for (char a = 'a'; a <= 'z'; ++a) {
    for (char b = 'a'; b <= 'z'; ++b) {
      for (char c = 'a'; c <= 'z'; ++c) {
        for (char d = 'a'; d <= 'z'; ++d) words.push_back({a, b, c, d});
      }
    }
  }
  const auto big = std::make_shared<const VocabTrie>(
      static_cast<int32_t>(words.size()), [&](int32_t id) { return words[id]; }, [](int32_t) { return false; });
  std::string runs = "root ::=";
  for (int i = 0; i < 300; ++i) runs += " s";
  runs += "\ns ::= [a-z]*\n";
  CHECK_THROWS_WITH(TokenGrammar::make_checked(Grammar::parse(runs), big), Catch::Contains("too ambiguous"));
  // An ordinary grammar over the same vocabulary is not.
  CHECK_NOTHROW(TokenGrammar::make_checked(Grammar::parse("root ::= [a-z]+ (\" \" [a-z]+)*\n"), big));
}

// Timings, not a check (hidden: run with "[bench]"): a real vocabulary's trie, then a JSON answer's
// steps: each step's mask as the scheduler takes it (constraint_mask: the state's mask and the end tokens),
// first against an empty mask cache, then again. KILN_VOCAB_GGUF names a GGUF with a vocabulary
// (../shared/data/tokenizer-vectors/ggml-vocab-deepseek-llm.gguf: 102,400 tokens).
TEST_CASE("token grammar: time of a JSON answer's masks over a real vocabulary", "[.][bench]") {
  const char* path = std::getenv("KILN_VOCAB_GGUF");
  if (path == nullptr) {
    WARN("set KILN_VOCAB_GGUF to a GGUF file with a vocabulary");
    return;
  }
  using clock = std::chrono::steady_clock;
  const auto ms = [](clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  const Tokenizer tokenizer = Tokenizer::from_gguf_file(path);
  const auto t0 = clock::now();
  const auto trie = VocabTrie::of(tokenizer);
  WARN("vocabulary " << tokenizer.vocab_size() << " tokens, trie " << trie->nodes().size() << " nodes, built in "
                     << ms(clock::now() - t0) << " ms");
  // Unbounded strings, then bounded ones (each character a new state: the expensive case).
  const char* schemas[] = {
      R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}},"ok":{"type":"boolean"}},"required":["name","age","tags","ok"]})",
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":60},"age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string","maxLength":12},"maxItems":5},"ok":{"type":"boolean"}},"required":["name","age","tags","ok"]})"};
  const std::vector<int32_t> ids = tokenizer.encode(
      R"({"name": "John Smith the third, of the house of Windsor", "age": 42, "tags": ["alpha", "beta gamma", "delta"], "ok": true})");
  const int32_t vocab_size = static_cast<int32_t>(tokenizer.vocab_size());
  const std::vector<int32_t> ends = {0};
  for (const char* text : schemas) {
  const auto g = TokenGrammar::make(Grammar::parse(json_schema_gbnf(nlohmann::ordered_json::parse(text))), trie);
  WARN("schema " << text);
  for (const char* round : {"first answer (masks computed)", "second answer (masks cached)"}) {
    auto state = g->start();
    double total = 0, worst = 0;
    size_t allowed_total = 0;
    std::vector<TokenMaskWord> mask(static_cast<size_t>(token_mask_words(vocab_size)));
    for (int32_t id : ids) {
      const auto start = clock::now();
      constraint_mask(*state, vocab_size, ends, mask);
      const double t = ms(clock::now() - start);
      total += t;
      worst = std::max(worst, t);
      allowed_total += kiln::test::mask_tokens(mask, vocab_size).size();
      REQUIRE(token_allowed(mask.data(), id));
      state->accept(id);
    }
    WARN(round << ": " << ids.size() << " tokens, masks " << total << " ms in all, " << total / ids.size()
               << " ms a token, the slowest " << worst << " ms; " << allowed_total / ids.size() << " allowed tokens a step");
  }
  }
}
