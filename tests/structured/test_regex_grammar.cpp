// Regular expressions as grammars (runtime/structured/regex_grammar.hpp): the strings each matches,
// as raw text (guided_regex) and inside a JSON string (a schema's pattern, escapes included), and
// the regex features a grammar cannot follow refused by name.
#include <catch2/catch.hpp>

#include <string>

#include "runtime/core/error.hpp"
#include "runtime/structured/grammar.hpp"
#include "runtime/structured/grammar_matcher.hpp"
#include "runtime/structured/regex_grammar.hpp"
#include "tests/structured/grammar_accepts.hpp"

using namespace kiln;

namespace {

bool regex_matches(const std::string& pattern, RegexText mode, const std::string& text) {
  return test::grammar_accepts(Grammar::parse("root ::= " + regex_gbnf(pattern, mode) + "\n"), text);
}
bool raw(const std::string& pattern, const std::string& text) { return regex_matches(pattern, RegexText::raw, text); }
bool in_json(const std::string& pattern, const std::string& text) { return regex_matches(pattern, RegexText::json_string, text); }

std::string regex_error(const std::string& pattern) {
  try {
    regex_gbnf(pattern, RegexText::raw);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("regex: the whole text matches, with classes, groups, alternation and quantifiers") {
  const std::string date = R"(^\d{4}-(0[1-9]|1[0-2])-\d{2}$)";
  CHECK(raw(date, "2026-12-05"));
  CHECK_FALSE(raw(date, "2026-13-05"));
  CHECK_FALSE(raw(date, "2026-12-05x"));
  CHECK(raw("[A-Z][a-z]+( [A-Z][a-z]+)*", "Ada Lovelace"));
  CHECK_FALSE(raw("[A-Z][a-z]+( [A-Z][a-z]+)*", "Ada lovelace"));
  CHECK(raw("(?:ab|cd){2,3}", "abcdab"));
  CHECK_FALSE(raw("(?:ab|cd){2,3}", "ab"));
  CHECK(raw("x{2,}?y", "xxxy"));          // lazy reads as greedy: the whole text matches
  CHECK(raw("a{,2}", "a{,2}"));           // not a quantifier in ECMAScript: text
  CHECK(raw(R"([^\s,]+,\w*)", "h\xC3\xA9llo,_9"));
  CHECK_FALSE(raw(R"([^\s,]+)", "a b"));
  CHECK(raw(R"(\x41\u00e9\.\[\\)", "A\xC3\xA9.[\\"));
  CHECK(raw("a.c", "a\xE2\x82\xAC" "c"));
  CHECK_FALSE(raw("a.c", "a\nc"));        // '.' is no line terminator
  CHECK(raw("(?<year>[0-9]{2})", "26"));  // a named group is a group
  CHECK(raw("", ""));
}

TEST_CASE("regex: inside a JSON string, as JSON writes it, and an unanchored pattern searches") {
  CHECK(in_json(R"(^a"b\\c\nd$)", R"(a\"b\\c\nd)"));  // the value a"b\c<newline>d, JSON-escaped
  CHECK_FALSE(in_json(R"(^a"b$)", "a\"b"));            // an unescaped quote would end the string
  CHECK(in_json(R"(^[^x]$)", R"(\")"));
  CHECK(in_json(R"(^[^x]$)", "\xC3\xA9"));
  CHECK_FALSE(in_json(R"(^[^x]$)", "\n"));             // a raw control character is no JSON
  CHECK(in_json("b+", "aaabbbccc"));                   // unanchored: anything around
  CHECK(in_json("^b+", R"(bb\u0041x)"));
  CHECK_FALSE(in_json("^b+$", "bbx"));
  // An unanchored alternation is one choice between the padding: "cat|dog" finds either anywhere.
  CHECK(in_json("cat|dog", "cats"));
  CHECK(in_json("cat|dog", "hotdog"));
  CHECK_FALSE(in_json("cat|dog", "cow"));
  // An escaped backslash before '$' leaves it the anchor; an escaped '$' is a dollar.
  CHECK(in_json(R"(^a\\$)", R"(a\\)"));
  CHECK_FALSE(in_json(R"(^a\\$)", R"(a\\b)"));
  CHECK(in_json(R"(^a\$)", "a$"));
}

TEST_CASE("regex: what a grammar cannot follow is an error naming it") {
  for (const char* loop : {"^(a*)*$", "(a|)+", "()*", "x(b?){2,}"}) {
    CHECK_THAT(regex_error(loop), Catch::Contains(std::string("pattern '") + loop + "'") && Catch::Contains("can match nothing"));
  }
  CHECK_THAT(regex_error("(?=a)b"), Catch::Contains("lookaround"));
  CHECK_THAT(regex_error(R"((a)\1)"), Catch::Contains("back-reference"));
  CHECK_THAT(regex_error(R"(\bword)"), Catch::Contains("word boundary"));
  CHECK_THAT(regex_error("a)"), Catch::Contains("unmatched ')'"));
  CHECK_THAT(regex_error("(a"), Catch::Contains("unterminated group"));
  CHECK_THAT(regex_error("[a-"), Catch::Contains("unterminated class"));
  CHECK_THAT(regex_error("[z-a]"), Catch::Contains("out of order"));
  CHECK_THAT(regex_error("a{3,1}"), Catch::Contains("n below m"));
  CHECK_THAT(regex_error("a**"), Catch::Contains("repeats a repetition"));
  CHECK_THAT(regex_error("*a"), Catch::Contains("repeats nothing"));
  CHECK_THAT(regex_error("a^b"), Catch::Contains("'^' inside"));
  CHECK_THAT(regex_error(R"(\q)"), Catch::Contains("unknown escape"));
  CHECK_THAT(regex_error("a{99999}"), Catch::Contains("more than"));
  CHECK_THAT(regex_error(std::string(100, '(') + std::string(100, ')')), Catch::Contains("deeper than"));
}
