// libFuzzer: structured output's inputs as a client sends them (runtime/structured): a GBNF
// grammar, a JSON schema, a list of choices or a regex, compiled into a TokenGrammar over a small
// vocabulary (every byte, and pieces of JSON several bytes long); then 48 steps of generation, each
// taking the constraint's mask and one allowed token chosen by the input's tail. Bad input must end
// in kiln::Error; a crash, a hang (a grammar that expands forever), unbounded memory or another
// exception is a finding. Checked too: the mask allows nothing past the vocabulary, and a state
// that allows no token lets the text end.
// Input: one byte of mode (0 GBNF, 1 JSON schema, 2 choices: a JSON list of strings, 3 a regex),
// the text, then after a NUL byte the choices of tokens.
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "runtime/core/strict_json.hpp"
#include "runtime/structured/grammar.hpp"
#include "runtime/structured/json_schema_grammar.hpp"
#include "runtime/structured/regex_grammar.hpp"
#include "runtime/structured/token_grammar.hpp"
#include "tests/fuzz/fuzz_support.hpp"
#include "tests/support/token_masks.hpp"

namespace {

const std::vector<std::string>& pieces() {
  static const std::vector<std::string> p = [] {
    std::vector<std::string> v;
    for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
    for (const char* s : {"{\"", "\":", "\",", "\"}", "true", "false", "null", "  ", "\n  ", "12", "-0", ".5", "e+",
                          "\\u00", "\\n", "ab", "abc", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "[{", "}]", "},",
                          "<|im_end|>"}) {
      v.emplace_back(s);
    }
    return v;
  }();
  return p;
}

const std::shared_ptr<const kiln::VocabTrie>& vocab() {
  static const auto trie = std::make_shared<const kiln::VocabTrie>(
      static_cast<int32_t>(pieces().size()), [](int32_t id) { return pieces()[id]; },
      [](int32_t id) { return pieces()[id] == "<|im_end|>"; });
  return trie;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 4;
  const std::string_view rest = kiln::fuzz::as_text(data + 1, size - 1);
  const size_t nul = rest.find('\0');
  const std::string_view text = rest.substr(0, nul);
  const std::string_view picks = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  kiln::fuzz::expect_kiln_errors_only([&] {
    std::string gbnf;
    if (mode == 0) {
      gbnf = std::string(text);
    } else if (mode == 3) {
      gbnf = "root ::= " + kiln::regex_gbnf(text, kiln::RegexText::raw) + "\n";
    } else {
      kiln::parse_json_strict(text, "the fuzz input");  // what the server checks first
      const auto j = nlohmann::ordered_json::parse(text);
      if (mode == 1) {
        gbnf = kiln::json_schema_gbnf(j);
      } else {
        if (!j.is_array()) return;
        std::vector<std::string> choices;
        for (const auto& c : j) {
          if (c.is_string()) choices.push_back(c.get<std::string>());
        }
        gbnf = kiln::choice_gbnf(choices);
      }
    }
    const auto grammar = kiln::TokenGrammar::make(kiln::Grammar::parse(gbnf), vocab());
    const int32_t vocab_size = static_cast<int32_t>(pieces().size()) + 3;  // model rows past the tokenizer
    auto state = grammar->start();
    for (size_t step = 0; step < 48; ++step) {
      bool can_end = false;
      std::vector<int32_t> allowed;
      try {
        allowed = kiln::test::allowed_tokens(*state, vocab_size, can_end);
      } catch (const kiln::Error&) {
        __builtin_trap();  // bits past the vocabulary
      }
      if (allowed.empty() && !can_end) __builtin_trap();  // bans every token and may not end
      if (allowed.empty() || (can_end && step < picks.size() && (picks[step] & 0x80))) break;
      const uint8_t pick = step < picks.size() ? static_cast<uint8_t>(picks[step]) : 0;
      state->accept(allowed[pick % allowed.size()]);
    }
  });
  return 0;
}
