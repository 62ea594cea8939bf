// GBNF grammars over bytes (runtime/structured/grammar.hpp) and the matcher's stacks
// (grammar_matcher.hpp): what a grammar accepts, byte by byte and at its end; UTF-8 classes; the
// errors a client's grammar gets; and grammars built to make the matcher blow up.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "runtime/core/error.hpp"
#include "runtime/structured/grammar.hpp"
#include "runtime/structured/grammar_matcher.hpp"
#include "tests/structured/grammar_accepts.hpp"

using namespace kiln;

namespace {

bool accepts(const Grammar& g, const std::string& text) { return test::grammar_accepts(g, text); }
bool prefix(const Grammar& g, const std::string& text) { return test::grammar_prefix(g, text); }

std::string parse_error(const std::string& gbnf) {
  try {
    Grammar::parse(gbnf);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("grammar: literals, classes, groups and repetitions accept exactly their sentences") {
  const Grammar g = Grammar::parse(R"(
    # a comment
    root  ::= greet (", " name)? "!"{1,3}
    greet ::= "hi" | "hello"
    name  ::= [A-Z] [a-z]*   # a capital, then lower case
  )");
  CHECK(accepts(g, "hi!"));
  CHECK(accepts(g, "hello, Bob!!!"));
  CHECK(accepts(g, "hi, X!!"));
  CHECK_FALSE(accepts(g, "hi"));            // a prefix only
  CHECK(prefix(g, "hi"));
  CHECK(prefix(g, "hello, Bo"));
  CHECK_FALSE(accepts(g, "hi!!!!"));        // {1,3}
  CHECK_FALSE(prefix(g, "hi, bob"));        // lower-case initial
  CHECK_FALSE(prefix(g, "hey"));
  CHECK_FALSE(accepts(g, ""));

  const Grammar counts = Grammar::parse(R"(root ::= "a"{2} "b"{2,} "c"{0,1} "d"+ "e"*)");
  CHECK(accepts(counts, "aabbd"));
  CHECK(accepts(counts, "aabbbbbcdddeee"));
  CHECK_FALSE(accepts(counts, "abbd"));
  CHECK_FALSE(accepts(counts, "aabd"));
  CHECK_FALSE(accepts(counts, "aabbccd"));
  CHECK_FALSE(accepts(counts, "aabb"));
}

TEST_CASE("grammar: escapes, negated classes and '.' over UTF-8, byte by byte") {
  const Grammar g = Grammar::parse(R"(root ::= "\"" [^"\\\n]* "\"" [\x41-\x43\u00e9]? "\t")");
  CHECK(accepts(g, "\"abc\"\t"));
  CHECK(accepts(g, "\"h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80\"B\t"));  // é, €, 😀 inside; B after
  CHECK(accepts(g, "\"\"\xC3\xA9\t"));                                       // é from \u00e9
  CHECK_FALSE(prefix(g, "\"a\nb"));                                          // newline excluded
  CHECK_FALSE(prefix(g, "\"a\\"));                                           // backslash excluded
  CHECK_FALSE(prefix(g, "\"\xC0\x80"));                                      // overlong: not UTF-8
  CHECK_FALSE(prefix(g, "\"\xED\xA0\x80"));                                  // a surrogate
  CHECK_FALSE(prefix(g, "\"\x80"));                                          // a lone continuation byte
  CHECK(prefix(g, "\"\xF0\x9F"));                                            // half of 😀: may go on
  CHECK_FALSE(accepts(g, "\"x\"D\t"));

  const Grammar any = Grammar::parse(R"(root ::= . . ".")");
  CHECK(accepts(any, "a\xE2\x82\xAC."));
  CHECK_FALSE(accepts(any, "ab"));
}

TEST_CASE("grammar: a client's mistakes are errors naming the rule or line") {
  CHECK_THAT(parse_error("root ::= item\n"), Catch::Contains("'item'") && Catch::Contains("never defined"));
  CHECK_THAT(parse_error("start ::= \"a\"\n"), Catch::Contains("no rule named 'root'"));
  CHECK_THAT(parse_error("root ::= root \"a\" | \"b\"\n"), Catch::Contains("'root' is left-recursive"));
  // Left recursion behind a rule that can match nothing.
  CHECK_THAT(parse_error("root ::= opt list\nopt ::= \"x\"?\nlist ::= root \"a\"\n"), Catch::Contains("left-recursive"));
  CHECK_THAT(parse_error("root ::= (\"a\"?)* \"b\"\n"), Catch::Contains("left-recursive"));
  CHECK_THAT(parse_error("root ::= \"a\"\nroot ::= \"b\"\n"), Catch::Contains("'root' is defined twice"));
  CHECK_THAT(parse_error("root ::= \"abc\n"), Catch::Contains("unterminated literal"));
  CHECK_THAT(parse_error("root ::= [ab\n"), Catch::Contains("unterminated character class"));
  CHECK_THAT(parse_error("root ::= \"\\q\"\n"), Catch::Contains("unknown escape"));
  CHECK_THAT(parse_error("root ::= \"a\"{3,2}\n"), Catch::Contains("max below min"));
  CHECK_THAT(parse_error("root ::= \"a\"{5000}\n"), Catch::Contains("repetition count above"));
  CHECK_THAT(parse_error("root ::= * \"a\"\n"), Catch::Contains("repeats nothing"));
  CHECK_THAT(parse_error("root ::= \"a\" )\n"), Catch::Contains("')' without '('"));
  CHECK_THAT(parse_error("\n\nroot ::= \"a\" $\n"), Catch::Contains("line 3"));
  CHECK_THAT(parse_error("root ::= [^\\x00-\\U0010FFFF]\n"), Catch::Contains("matches nothing"));
  CHECK_THAT(parse_error("root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')') + "\n"),
             Catch::Contains("nest deeper"));
  CHECK_THAT(parse_error("root ::= \"" + std::string(300, 'a') + "\"{4000}\n"), Catch::Contains("expand past"));
  // Counted across rules and for the optional copies too, before they are built: 20,000 rules of a
  // 4,096-fold repetition would otherwise take gigabytes before the limit is seen.
  std::string many = "root ::= r0\n";
  for (int i = 0; i < 20000; ++i) many += "r" + std::to_string(i) + " ::= \"a\"{4096}\n";
  CHECK_THAT(parse_error(many), Catch::Contains("expand past"));
  CHECK_THAT(parse_error("root ::= \"" + std::string(20000, 'a') + "\"{0,4096}\n"), Catch::Contains("expand past"));
  // A rule named like a helper the parser makes is still the client's own.
  const Grammar g = Grammar::parse("root ::= (x)* root_0\nroot_0 ::= \"b\"\nx ::= \"a\"\n");
  CHECK(accepts(g, "aab"));
}

TEST_CASE("grammar matcher: ambiguous grammars and long rule chains stay bounded") {
  // Three ways to read every "a": the stacks are interned, so 2,000 bytes stay linear.
  const Grammar ambiguous = Grammar::parse(R"(root ::= ("a" | "a" | "aa")* "b")");
  const auto start = std::chrono::steady_clock::now();
  CHECK(accepts(ambiguous, std::string(2000, 'a') + "b"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));

  // A chain of rules deeper than the matcher expands: refused at the start, not a stack overflow.
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 6000; ++i) chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  chain += "r6000 ::= \"x\"\n";
  const Grammar deep = Grammar::parse(chain);
  GrammarMatcher m(deep);
  CHECK(m.start().dead());
  // Within the limit, the same chain matches.
  std::string shallow = "root ::= r0\n";
  for (int i = 0; i < 100; ++i) shallow += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  shallow += "r100 ::= \"x\"\n";
  CHECK(accepts(Grammar::parse(shallow), "x"));

  // Nesting deeper than kMaxDepth stacks is refused past that depth, not grown without bound.
  const Grammar nest = Grammar::parse(R"(root ::= "[" root "]" | "x")");
  CHECK(accepts(nest, std::string(100, '[') + "x" + std::string(100, ']')));
  CHECK_FALSE(prefix(nest, std::string(GrammarMatcher::kMaxDepth + 10, '[')));
}

TEST_CASE("grammar matcher: states compare equal when the stacks do") {
  const Grammar g = Grammar::parse(R"(root ::= "{" ("a" | "b")* "}")");
  GrammarMatcher m(g);
  const GrammarState s0 = m.start();
  const GrammarState a = m.advance(s0, "{a"), b = m.advance(s0, "{b"), ab = m.advance(s0, "{ab");
  CHECK(a.stacks == b.stacks);
  CHECK(a.key() == ab.key());
  CHECK(a.key() != s0.key());
  CHECK_FALSE(a.can_end());
  CHECK(m.advance(a, "}").can_end());
  CHECK(m.advance(a, "}x").dead());
}
