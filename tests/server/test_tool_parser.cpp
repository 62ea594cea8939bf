// Tool calls in the models' own formats (runtime/server/tool_parser.hpp): what parses becomes calls,
// the rest content; text that only looks like a call stays text; streaming holds back exactly what
// may still become a call.
#include <catch2/catch.hpp>

#include <string>

#include "runtime/core/error.hpp"
#include "runtime/server/tool_parser.hpp"

using namespace kiln;

TEST_CASE("tool parser hermes: <tool_call> blocks become calls, the text around them content") {
  const auto p = ToolCallParser::make("hermes");
  ParsedAnswer a = p->parse("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>");
  CHECK(a.content == "Let me check.");
  REQUIRE(a.calls.size() == 1);
  CHECK(a.calls[0].name == "get_weather");
  CHECK(a.calls[0].arguments == R"({"city":"Paris","days":2})");  // the model's key order

  a = p->parse("<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>");
  CHECK(a.content.empty());
  REQUIRE(a.calls.size() == 2);
  CHECK(a.calls[1].name == "b");
  CHECK(a.calls[1].arguments == R"({"x":1})");  // arguments written as JSON text

  // SmolLM2's template: a list in one block; a last block the model ended without closing.
  a = p->parse("<tool_call>[{\"name\": \"f\", \"arguments\": {\"k\": true}}, {\"name\": \"g\"}]</tool_call>");
  REQUIRE(a.calls.size() == 2);
  CHECK(a.calls[1].arguments == "{}");
  a = p->parse("<tool_call>{\"name\": \"f\", \"arguments\": {\"k\": null}}");
  REQUIRE(a.calls.size() == 1);

  // Not a call after all: all of it is text.
  for (const char* text : {"no calls here", "<tool_call>{\"name\": 3}</tool_call>", "<tool_call>{\"name\": \"f\", \"argu",
                           "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>[[[[]]]]</tool_call>"}) {
    a = p->parse(text);
    CHECK(a.calls.empty());
    CHECK(a.content == text);
  }
  // Deeper than any JSON kiln reads: refused as text, not parsed recursively.
  const std::string deep = "<tool_call>" + std::string(100000, '[') + "</tool_call>";
  CHECK(p->parse(deep).calls.empty());
}

TEST_CASE("tool parser hermes: streaming holds back what may still become a call") {
  const auto p = ToolCallParser::make("hermes");
  CHECK(p->settled_content("Hello") == 5);
  CHECK(p->settled_content("Hello <tool") == 6);
  CHECK(p->settled_content("Hello <tool_call>{") == 6);
  CHECK(p->settled_content("a < b") == 5);
  CHECK(p->settled_content("x<") == 1);
}

TEST_CASE("tool parser llama3_json: a whole answer of JSON calls, <|python_tag|> dropped") {
  const auto p = ToolCallParser::make("llama3_json");
  ParsedAnswer a = p->parse(" {\"name\": \"get_time\", \"parameters\": {\"zone\": \"UTC\"}}");
  REQUIRE(a.calls.size() == 1);
  CHECK(a.calls[0].name == "get_time");
  CHECK(a.calls[0].arguments == R"({"zone":"UTC"})");
  CHECK(a.content.empty());
  a = p->parse("<|python_tag|>{\"name\": \"a\", \"parameters\": {\"s\": \"x;y}\"}}; {\"name\": \"b\", \"arguments\": {}}");
  REQUIRE(a.calls.size() == 2);
  CHECK(a.calls[0].arguments == R"({"s":"x;y}"})");  // a ";" and a brace inside a string split nothing
  CHECK(a.calls[1].name == "b");
  for (const char* text : {"The answer is 4.", "{\"name\": \"a\", \"parameters\": {}} and then text", "{not json}",
                           "{\"name\": \"a\"; \"parameters\": {}}"}) {
    a = p->parse(text);
    CHECK(a.calls.empty());
    CHECK(a.content == text);
  }
  CHECK(p->settled_content("  ") == 0);
  CHECK(p->settled_content("  {\"na") == 0);
  CHECK(p->settled_content("<|pyth") == 0);
  CHECK(p->settled_content("Sure, ") == 6);
}

TEST_CASE("tool parser pythonic: a whole answer of Python calls, keyword literals as JSON arguments") {
  const auto p = ToolCallParser::make("pythonic");
  ParsedAnswer a = p->parse(" [get_weather(city=\"Paris\", days=2), now()]\n");
  CHECK(a.content.empty());
  REQUIRE(a.calls.size() == 2);
  CHECK(a.calls[0].name == "get_weather");
  CHECK(a.calls[0].arguments == R"({"city":"Paris","days":2})");  // the model's order
  CHECK(a.calls[1].name == "now");
  CHECK(a.calls[1].arguments == "{}");
  // Python's literals: quotes of both kinds and triple, escapes, True / False / None, negative and
  // underscored numbers, floats, lists, tuples as arrays, (x) as x, dicts with int keys, trailing commas.
  a = p->parse(R"([f(a='it\'s', b="\u00e9\x41\101\q", c="""two
lines""", d=[True, False, None], e=-1_000, g=2.5e-3, h=(1, 2), i=(3), j={'k': [], 7: 'v', None: 0},)])");
  REQUIRE(a.calls.size() == 1);
  CHECK(a.calls[0].arguments ==
        R"({"a":"it's","b":"éAA\\q","c":"two\nlines","d":[true,false,null],"e":-1000,"g":0.0025,"h":[1,2],"i":3,)"
        R"("j":{"k":[],"7":"v","null":0}})");
  // Not a call list: the answer is text, whole.
  for (const char* text : {"[1, 2, 3]", "[]", "[f(1)]", "[f(x=y)]", "[os.system(c='ls')]", "[f(x=1, x=2)]", "[f(x={1, 2})]",
                           "[f(x=0x1F)]", "[f(x=012)]", "[f(x=1e999)]", R"([f(x='a\N{BULLET}')])", R"([f(x='\ud800')])",
                           "[f(x='open)]", "[f(x=1)] and more", "Call f(x=1) now.", "[f(x=1)", "[f(x=[1,)]",
                           "[f(x=99999999999999999999)]", "[f(x='a\nb')]"}) {
    a = p->parse(text);
    INFO(text);
    CHECK(a.calls.empty());
    CHECK(a.content == text);
  }
  // Nesting past kJsonMaxDepth is refused, not followed.
  CHECK(p->parse("[f(x=" + std::string(100000, '[') + std::string(100000, ']') + ")]").calls.empty());
  CHECK(p->parse("[f(x=" + std::string(60, '[') + std::string(60, ']') + ")]").calls.size() == 1);
  CHECK(p->settled_content(" ") == 0);
  CHECK(p->settled_content("\n[get_wea") == 0);
  CHECK(p->settled_content("Paris") == 5);
}

TEST_CASE("tool parser: an unknown name is an error naming the choices") {
  CHECK_THROWS_WITH(ToolCallParser::make("mistral"), Catch::Contains("'mistral'") && Catch::Contains("hermes"));
}
