// JSON schemas compiled to grammars (runtime/structured/json_schema_grammar.hpp): random sentences
// of each grammar parse as JSON and hold what the schema says; hand-written texts are accepted or
// refused as a validator would; unsupported keywords are errors naming where they are.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/structured/grammar.hpp"
#include "runtime/structured/grammar_matcher.hpp"
#include "runtime/structured/json_schema_grammar.hpp"
#include "tests/structured/grammar_accepts.hpp"

using namespace kiln;
using ojson = nlohmann::ordered_json;

namespace {

Grammar compile(const std::string& schema) { return Grammar::parse(json_schema_gbnf(ojson::parse(schema))); }

bool json_accepts(const Grammar& g, const std::string& text) { return test::grammar_accepts(g, text); }

// A random sentence of g: bytes drawn among those the grammar allows, ending where it may (at
// random, or once past `soft` bytes, steering to closing punctuation so that strings end).
std::string random_sentence(const Grammar& g, std::mt19937& rng, size_t soft = 60) {
  GrammarMatcher m(g);
  GrammarState s = m.start();
  std::string out;
  for (size_t n = 0; n < 4000; ++n) {
    std::vector<int> ok;
    for (int b = 0; b < 256; ++b) {
      if (!m.advance(s, std::string(1, static_cast<char>(b))).dead()) ok.push_back(b);
    }
    if (s.can_end() && (ok.empty() || rng() % 4 == 0 || out.size() > soft)) return out;
    REQUIRE_FALSE(ok.empty());
    int b = ok[rng() % ok.size()];
    if (out.size() > soft) {
      for (int want : {'"', '}', ']', '0', 'n', 'u', 'l', 't', 'r', 'e', 'f', 'a', 's'}) {
        if (std::find(ok.begin(), ok.end(), want) != ok.end()) {
          b = want;
          break;
        }
      }
    }
    out += static_cast<char>(b);
    s = m.advance(s, std::string(1, static_cast<char>(b)));
  }
  FAIL("no sentence within 4000 bytes: " << out);
  return out;
}

void check_sentences(const std::string& schema, const std::function<bool(const nlohmann::json&)>& holds) {
  const Grammar g = compile(schema);
  std::mt19937 rng(7);
  for (int i = 0; i < 25; ++i) {
    const std::string text = random_sentence(g, rng);
    INFO(schema << "\n -> " << text);
    nlohmann::json v;
    REQUIRE_NOTHROW(v = nlohmann::json::parse(text));
    CHECK(holds(v));
  }
}

std::string compile_error(const std::string& schema) {
  try {
    json_schema_gbnf(ojson::parse(schema));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("json schema: random sentences of each grammar are JSON that holds the schema") {
  check_sentences(R"({"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"integer"},"c":{"type":"string","maxLength":5}},"required":["a"]})",
                  [](const nlohmann::json& v) {
                    if (!v.is_object() || !v.contains("a") || !v["a"].is_boolean()) return false;
                    if (v.contains("b") && !v["b"].is_number_integer()) return false;
                    if (v.contains("c") && !(v["c"].is_string() && v["c"].get<std::string>().size() <= 5 * 4)) return false;
                    for (const auto& [k, x] : v.items()) {
                      if (k != "a" && k != "b" && k != "c") return false;
                    }
                    return true;
                  });
  check_sentences(R"({"type":"array","items":{"enum":["x",3,null,true]},"minItems":1,"maxItems":3})", [](const nlohmann::json& v) {
    if (!v.is_array() || v.empty() || v.size() > 3) return false;
    for (const auto& x : v) {
      if (!(x == "x" || x == 3 || x.is_null() || x == true)) return false;
    }
    return true;
  });
  check_sentences(R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"boolean"}],"items":false})",
                  [](const nlohmann::json& v) {
                    return v.is_array() && v.size() <= 2 && (v.empty() || v[0].is_number_integer()) &&
                           (v.size() < 2 || v[1].is_boolean());
                  });
  check_sentences(R"({"anyOf":[{"type":"number"},{"type":"null"},{"const":"hi"}]})",
                  [](const nlohmann::json& v) { return v.is_number() || v.is_null() || v == "hi"; });
  check_sentences(R"({"type":["string","integer"]})", [](const nlohmann::json& v) { return v.is_string() || v.is_number_integer(); });
  check_sentences(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"],"additionalProperties":false}},"$ref":"#/$defs/node"})",
                  [](const nlohmann::json& v) {
                    for (const nlohmann::json* n = &v; !n->is_null(); n = &(*n)["next"]) {
                      if (!n->is_object() || n->size() != 2 || !(*n)["v"].is_number_integer() || !n->contains("next")) return false;
                    }
                    return true;
                  });
  check_sentences(R"({"type":"object","additionalProperties":{"type":"integer"}})", [](const nlohmann::json& v) {
    if (!v.is_object()) return false;
    for (const auto& [k, x] : v.items()) {
      if (!x.is_number_integer()) return false;
    }
    return true;
  });
  check_sentences("{}", [](const nlohmann::json&) { return true; });
}

TEST_CASE("json schema: hand-written texts accepted or refused as a validator would") {
  const Grammar g = compile(R"({"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string","minLength":2},"tags":{"type":"array","items":{"type":"string"}}},"required":["id","name"],"additionalProperties":false})");
  CHECK(json_accepts(g, R"({"id": 5, "name": "ab"})"));
  CHECK(json_accepts(g, R"({"id":-12,"name":"h\u00e9\n\"q\"","tags":["x", ""]})"));
  CHECK(json_accepts(g, "{\n  \"id\": 0,\n  \"name\": \"\xC3\xA9\xC3\xA9\"\n}"));
  CHECK_FALSE(json_accepts(g, R"({"name": "ab", "id": 5})"));    // the schema's order
  CHECK_FALSE(json_accepts(g, R"({"id": 5})"));                  // name is required
  CHECK_FALSE(json_accepts(g, R"({"id": 5, "name": "a"})"));     // minLength
  CHECK_FALSE(json_accepts(g, R"({"id": 5.5, "name": "ab"})"));  // an integer
  CHECK_FALSE(json_accepts(g, R"({"id": 05, "name": "ab"})"));   // no leading zero
  CHECK_FALSE(json_accepts(g, R"({"id": 5, "name": "ab", "x": 1})"));  // no other property
  CHECK_FALSE(json_accepts(g, "{\"id\": 5, \"name\": \"a\tb\"}"));     // a raw control character
  CHECK_FALSE(json_accepts(g, "{\"id\": 5, \"name\": \"ab\"}" + std::string(30, ' ')));  // bounded whitespace

  // Optional properties in any subset, in order; the first one written takes no comma.
  const Grammar opt = compile(R"({"type":"object","properties":{"a":{"type":"null"},"b":{"type":"null"},"c":{"type":"null"}}})");
  for (const char* text : {"{}", R"({"b":null})", R"({"a":null,"c":null})", R"({"a":null,"b":null,"c":null})", R"({"c":null})"}) {
    CHECK(json_accepts(opt, text));
  }
  CHECK_FALSE(json_accepts(opt, R"({,"b":null})"));
  CHECK_FALSE(json_accepts(opt, R"({"c":null,"a":null})"));
  CHECK_FALSE(json_accepts(opt, R"({"a":null,})"));

  const Grammar numbers = compile(R"({"type":"array","items":{"type":"number"},"maxItems":2})");
  CHECK(json_accepts(numbers, "[1.5e-3, -0.25]"));
  CHECK(json_accepts(numbers, "[]"));
  CHECK_FALSE(json_accepts(numbers, "[1, 2, 3]"));
  CHECK_FALSE(json_accepts(numbers, "[.5]"));
  CHECK_FALSE(json_accepts(numbers, "[1,]"));
}

TEST_CASE("json schema: what is not supported is an error naming the keyword and where") {
  CHECK_THAT(compile_error(R"({"type":"object","properties":{"zip":{"type":"string","pattern":"^(?=9)[0-9]+$"}}})"),
             Catch::Contains("/properties/zip/pattern") && Catch::Contains("lookaround"));
  CHECK_THAT(compile_error(R"({"type":"number","multipleOf":0.5})"), Catch::Contains("'multipleOf'"));
  CHECK_THAT(compile_error(R"({"type":"number","minimum":1,"exclusiveMaximum":1})"), Catch::Contains("no number lies between"));
  CHECK_THAT(compile_error(R"({"type":"number","minimum":1e-20})"), Catch::Contains("/minimum") && Catch::Contains("16 fractional"));
  CHECK_THAT(compile_error(R"({"type":"integer","minimum":5,"maximum":4})"), Catch::Contains("no integer lies between"));
  CHECK_THAT(compile_error(R"({"type":"integer","maximum":1e300})"), Catch::Contains("16 digits"));
  CHECK_THAT(compile_error(R"({"type":"string","format":"email"})"), Catch::Contains("/format") && Catch::Contains("'format'"));
  CHECK_THAT(compile_error(R"({"type":"string","pattern":"a","maxLength":3})"), Catch::Contains("together"));
  CHECK_THAT(compile_error(R"({"$ref":"#/$defs/missing"})"), Catch::Contains("names no schema"));
  CHECK_THAT(compile_error(R"({"type":"string","minLength":5,"maxLength":2})"), Catch::Contains("below 'minLength'"));
  CHECK_THAT(compile_error(R"({"type":"object","properties":{"a":false}})"), Catch::Contains("/properties/a") && Catch::Contains("allows no value"));
  CHECK_THAT(compile_error(R"({"type":"tuple"})"), Catch::Contains("unknown type 'tuple'"));
  CHECK_THAT(compile_error(R"({"allOf":[{"type":"integer"},{"type":"number"}]})"), Catch::Contains("exactly one"));
  CHECK_THAT(compile_error(R"([1, 2])"), Catch::Contains("must be an object or a boolean"));
  CHECK_THAT(compile_error(R"({"type":"array","maxItems":99999})"), Catch::Contains("'maxItems' must be an integer in [0, 4096]"));
  // Annotations change nothing.
  CHECK(compile_error(R"({"title":"T","description":"d","type":"boolean","default":true,"examples":[false]})").empty());
}

TEST_CASE("json schema: integer bounds, string patterns and formats") {
  const auto in_range = [](const std::string& schema, int64_t lo, int64_t hi, std::initializer_list<int64_t> probes) {
    const Grammar g = compile(schema);
    for (int64_t v : probes) {
      INFO(schema << " " << v);
      CHECK(json_accepts(g, std::to_string(v)) == (v >= lo && v <= hi));
    }
  };
  in_range(R"({"type":"integer","minimum":0})", 0, INT64_MAX, {-1, 0, 1, 9, 10, 123456789012345});
  in_range(R"({"type":"integer","minimum":-15,"maximum":230})", -15, 230,
           {-100, -16, -15, -9, -1, 0, 7, 10, 99, 100, 199, 200, 229, 230, 231, 999});
  in_range(R"({"type":"integer","exclusiveMinimum":9,"exclusiveMaximum":1000})", 10, 999, {9, 10, 11, 99, 100, 998, 999, 1000});
  in_range(R"({"type":"integer","maximum":-3})", INT64_MIN, -3, {-3, -2, 0, 5, -4, -1000000});
  in_range(R"({"type":"integer","minimum":3,"exclusiveMinimum":true,"maximum":7})", 4, 7, {3, 4, 7, 8});  // draft 4
  in_range(R"({"type":"integer","minimum":1.5,"maximum":3.5})", 2, 3, {1, 2, 3, 4});
  const Grammar g = compile(R"({"type":"integer","minimum":-5,"maximum":5})");
  CHECK_FALSE(json_accepts(g, "-0"));
  CHECK_FALSE(json_accepts(g, "05"));
  check_sentences(R"({"type":"integer","minimum":17,"maximum":4321})",
                  [](const nlohmann::json& v) { return v.is_number_integer() && v >= 17 && v <= 4321; });

  const Grammar zip = compile(R"({"type":"string","pattern":"^[0-9]{5}(-[0-9]{4})?$"})");
  CHECK(json_accepts(zip, R"("12345")"));
  CHECK(json_accepts(zip, R"("12345-6789")"));
  CHECK_FALSE(json_accepts(zip, R"("1234")"));
  const Grammar contains = compile(R"({"type":"string","pattern":"ab+c"})");
  CHECK(json_accepts(contains, R"("xxabbbcyy")"));
  CHECK_FALSE(json_accepts(contains, R"("xxacyy")"));
  const Grammar when = compile(R"({"type":"string","format":"date-time"})");
  CHECK(json_accepts(when, R"("2026-12-05T06:59:01Z")"));
  CHECK(json_accepts(when, R"("2026-12-05T06:59:01.250+01:00")"));
  CHECK_FALSE(json_accepts(when, R"("2026-13-05T06:59:01Z")"));
  CHECK(json_accepts(compile(R"({"format":"uuid"})"), R"("123e4567-e89b-12d3-a456-426614174000")"));
  CHECK(json_accepts(compile(R"({"type":"string","format":"date"})"), R"("1999-01-31")"));
  CHECK(json_accepts(compile(R"({"type":"string","format":"time"})"), R"("23:59:59Z")"));
}

// A number's bounds are exact decimals: each probe's acceptance against the value it spells, compared
// as integers scaled by 10^16 (every probe and bound has at most 16 fractional digits).
TEST_CASE("json schema: number bounds, inclusive and exclusive, decimal by decimal") {
  const auto scaled = [](const std::string& text) {
    __int128 v = 0;
    size_t i = text[0] == '-' ? 1 : 0, frac = 0;
    bool point = false;
    for (; i < text.size(); ++i) {
      if (text[i] == '.') {
        point = true;
        continue;
      }
      v = v * 10 + (text[i] - '0');
      frac += point ? 1 : 0;
    }
    for (; frac < 16; ++frac) v *= 10;
    return text[0] == '-' ? -v : v;
  };
  struct Case {
    const char* schema;
    const char *lo, *hi;  // null: none
    bool lo_exclusive, hi_exclusive;
  };
  const Case cases[] = {
      {R"({"type":"number","minimum":0,"maximum":1})", "0", "1", false, false},
      {R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})", "0", "1", true, true},
      {R"({"type":"number","minimum":0.25})", "0.25", nullptr, false, false},
      {R"({"type":"number","maximum":-1.5})", nullptr, "-1.5", false, false},
      {R"({"type":"number","minimum":-2.05,"exclusiveMaximum":3.1})", "-2.05", "3.1", false, true},
      {R"({"type":"number","minimum":-0.001,"maximum":-0.0005})", "-0.001", "-0.0005", false, false},
      {R"({"type":"number","minimum":1.25,"exclusiveMinimum":true,"maximum":1.5})", "1.25", "1.5", true, false},  // draft 4
      {R"({"type":"number","minimum":12.5,"maximum":12.5})", "12.5", "12.5", false, false},
      {R"({"type":"number","minimum":0.1,"exclusiveMinimum":0.1,"maximum":99})", "0.1", "99", true, false},  // the tighter
      {R"({"type":"number","exclusiveMinimum":-7,"maximum":0})", "-7", "0", true, false},
  };
  std::vector<std::string> probes = {"0", "1", "0.5", "0.0", "1.0", "1.00001", "0.99999", "0.25", "0.250", "0.2499",
                                     "0.2500000000000001", "-1.5", "-1.50", "-1.4", "-1.6", "-2.05", "-2.050", "-2.0501",
                                     "-2.0499", "3.1", "3.0999999", "3.10", "-0.001", "-0.0010", "-0.0005", "-0.00051",
                                     "-0.00049", "-0.0011", "1.25", "1.2500", "1.2501", "1.5", "1.50", "1.5001", "12.5",
                                     "12.50", "12.49", "12", "13", "0.1", "0.10", "0.1000001", "99", "99.0", "99.01",
                                     "-7", "-7.0", "-6.9999", "-8", "100", "123456789012345", "0.0000000000000001"};
  std::mt19937 rng(11);
  for (int i = 0; i < 300; ++i) {  // and random ones near the bounds
    std::string t = (rng() % 2 ? "-" : "") + std::to_string(rng() % 15);
    if (rng() % 3 != 0) {
      t += ".";
      for (int d = 0, n = 1 + static_cast<int>(rng() % 5); d < n; ++d) t += static_cast<char>('0' + rng() % 10);
    }
    if (scaled(t) != 0 || t[0] != '-') probes.push_back(t);  // "-0", "-0.00": JSON, but not the grammar's form
  }
  for (const Case& c : cases) {
    const Grammar g = compile(c.schema);
    for (const std::string& t : probes) {
      const __int128 v = scaled(t);
      bool in = true;
      if (c.lo) in = in && (c.lo_exclusive ? v > scaled(c.lo) : v >= scaled(c.lo));
      if (c.hi) in = in && (c.hi_exclusive ? v < scaled(c.hi) : v <= scaled(c.hi));
      INFO(c.schema << " " << t);
      CHECK(json_accepts(g, t) == in);
    }
    CHECK_FALSE(json_accepts(g, "1e0"));  // no exponent, no "-0", no leading zeros
    CHECK_FALSE(json_accepts(g, "-0"));
    CHECK_FALSE(json_accepts(g, "00.5"));
  }
  check_sentences(R"({"type":"array","items":{"type":"number","minimum":-0.75,"exclusiveMaximum":2.5}})",
                  [](const nlohmann::json& v) {
                    for (const auto& x : v) {
                      if (!x.is_number() || x.get<double>() < -0.75 || x.get<double>() >= 2.5) return false;
                    }
                    return true;
                  });
}

TEST_CASE("json schema: an object of no stated members is any object, and a type list gives each type its own keywords") {
  const Grammar any = compile(R"({"type":"object","properties":{"meta":{"type":"object"}},"required":["meta"]})");
  CHECK(json_accepts(any, R"({"meta":{"a":1,"b":[true]}})"));
  CHECK(json_accepts(any, R"({"meta":{}})"));
  CHECK_FALSE(json_accepts(any, R"({"meta":[]})"));
  const Grammar opt = compile(R"({"type":["string","null"],"maxLength":3})");
  CHECK(json_accepts(opt, R"("abc")"));
  CHECK(json_accepts(opt, "null"));
  CHECK_FALSE(json_accepts(opt, R"("abcd")"));
  const Grammar obj = compile(R"({"type":["object","null"],"properties":{"x":{"type":"integer"}},"required":["x"]})");
  CHECK(json_accepts(obj, R"({"x":1})"));
  CHECK(json_accepts(obj, "null"));
  CHECK_FALSE(json_accepts(obj, R"({"y":1})"));
  // Additional properties may not take a declared property's name (nor write it twice).
  const Grammar extra = compile(R"({"type":"object","properties":{"a":{"type":"integer"},"bc":{"type":"integer"}},"additionalProperties":true})");
  CHECK(json_accepts(extra, R"({"a":1,"x":"y"})"));
  CHECK(json_accepts(extra, R"({"ab":"y","b":2,"bcd":[],"":0})"));
  CHECK(json_accepts(extra, R"({"bc":3,"b\u0063":1})"));  // (an escaped spelling is not recognized)
  CHECK_FALSE(json_accepts(extra, R"({"a":"x"})"));
  CHECK_FALSE(json_accepts(extra, R"({"a":1,"a":"x"})"));
  CHECK_FALSE(json_accepts(extra, R"({"bc":"x"})"));
  // A keyword of no listed type's is still refused where it would be ignored.
  CHECK_THAT(compile_error(R"({"type":["number","null"],"multipleOf":2})"), Catch::Contains("'multipleOf'"));
}

TEST_CASE("json schema: compact JSON has no whitespace between tokens") {
  const Grammar g = Grammar::parse(json_schema_gbnf(ojson::parse(R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}})"), true));
  CHECK(json_accepts(g, R"({"a":[1,2]})"));
  CHECK(json_accepts(g, R"({})"));
  CHECK_FALSE(json_accepts(g, R"({"a": [1,2]})"));
  CHECK_FALSE(json_accepts(g, R"({"a":[1, 2]})"));
  CHECK_FALSE(json_accepts(g, "{\"a\":[1]}\n"));
  const Grammar o = Grammar::parse(json_object_gbnf(true));
  CHECK(json_accepts(o, R"({"x":{"y":[true,null]}})"));
  CHECK_FALSE(json_accepts(o, R"({ })"));
}

TEST_CASE("json schema: choices and the JSON-object grammar") {
  const Grammar c = Grammar::parse(choice_gbnf({"yes", "no", "\"quoted\"\n"}));
  CHECK(json_accepts(c, "yes"));
  CHECK(json_accepts(c, "\"quoted\"\n"));
  CHECK_FALSE(json_accepts(c, "yes "));
  CHECK_FALSE(json_accepts(c, "n"));
  CHECK_THROWS_WITH(choice_gbnf({}), Catch::Contains("empty"));
  // Choices that are prefixes of others, UTF-8, and many: one trie, each whole choice and no other.
  const Grammar p = Grammar::parse(choice_gbnf({"a", "ab", "abc", "\xC3\xA9t\xC3\xA9", "\xC3\xA9", "b"}));
  for (const char* yes : {"a", "ab", "abc", "\xC3\xA9t\xC3\xA9", "\xC3\xA9", "b"}) CHECK(json_accepts(p, yes));
  for (const char* no : {"", "abcd", "ac", "\xC3\xA9t", "bb"}) CHECK_FALSE(json_accepts(p, no));
  std::vector<std::string> many;
  for (int i = 0; i < 20000; ++i) many.push_back("item-" + std::to_string(i * 7919 % 100003));
  const Grammar m = Grammar::parse(choice_gbnf(many));
  GrammarMatcher matcher(m);
  const GrammarState start = matcher.start();
  CHECK_FALSE(matcher.limited());
  CHECK(start.stacks.size() == 1);  // every choice begins with "item-": one way to begin
  CHECK(json_accepts(m, many[123]));
  CHECK_FALSE(json_accepts(m, "item-100004"));

  const Grammar o = Grammar::parse(json_object_gbnf());
  CHECK(json_accepts(o, R"({"a": [1, {"b": null}, "x"], "c": false})"));
  CHECK(json_accepts(o, "{}"));
  CHECK_FALSE(json_accepts(o, "[]"));
  CHECK_FALSE(json_accepts(o, R"({"a" 1})"));
}
