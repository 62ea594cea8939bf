// UTF-8 repair: what invalid input becomes (Python's bytes.decode("utf-8", "replace") results),
// the incremental assembler, and Python-compatible whitespace stripping.
#include <catch2/catch.hpp>

#include <random>

#include "runtime/tokenizer/utf8.hpp"
#include "tests/tokenizer/tokenizer_test_util.hpp"

using namespace kiln;

TEST_CASE("sanitize replaces each maximal ill-formed subsequence with one U+FFFD") {
  const std::string R(utf8::kReplacement);
  // Expected values are Python's bytes.decode("utf-8", "replace").
  const std::vector<std::pair<std::string, std::string>> cases{
      {"\xFF", R},
      {"\xE2\x82", R},
      {"\xE2\x82" "A", R + "A"},
      {"\xF0\x9F\x98", R},
      {"\xED\xA0\x80", R + R + R},  // a surrogate is three errors
      {"\xC0\xAF", R + R},          // overlong
      {"a\x80" "b", "a" + R + "b"},
      {"\xF4\x90\x80\x80", R + R + R + R},  // above U+10FFFF
      {"\xE0\x80\x80", R + R + R},
      {"\xF0\x9F\x98\x80\xF0", "\xF0\x9F\x98\x80" + R},
      {"\xC3", R},
      {"\xC3\xA9\xE9", "\xC3\xA9" + R},
      {"\xEF\xBB\xBF", "\xEF\xBB\xBF"},
      {"plain ascii", "plain ascii"},
  };
  for (const auto& [input, expected] : cases) {
    INFO("input bytes: " << input.size());
    CHECK(utf8::sanitize(input) == expected);
    CHECK(utf8::is_valid(input) == (input == expected));
  }
}

TEST_CASE("the assembler fed in random chunks gives what sanitize gives for the whole") {
  std::mt19937 rng(99);
  for (int round = 0; round < 2000; ++round) {
    std::string bytes;
    const size_t length = rng() % 24;
    for (size_t i = 0; i < length; ++i) {
      // Mostly bytes that take part in multi-byte sequences, so that errors are frequent.
      const uint32_t kind = rng() % 4;
      bytes.push_back(static_cast<char>(kind == 0 ? 0x20 + rng() % 0x5F : kind == 1 ? 0x80 + rng() % 0x40
                                                                          : 0xC0 + rng() % 0x40));
    }
    utf8::Assembler assembler;
    std::string out;
    for (size_t pos = 0; pos < bytes.size();) {
      const size_t take = std::min<size_t>(1 + rng() % 3, bytes.size() - pos);
      std::string chunk;
      assembler.push(std::string_view(bytes).substr(pos, take), chunk);
      CHECK(utf8::is_valid(chunk));
      out += chunk;
      pos += take;
    }
    assembler.flush(out);
    CHECK(out == utf8::sanitize(bytes));
    CHECK(utf8::is_valid(out));
  }
}

TEST_CASE("invalid UTF-8 input encodes as its U+FFFD-repaired text") {
  for (const auto& name : test::vector_names()) {
    const Tokenizer& tokenizer = test::gguf_tokenizer(name);
    const std::string bad = "caf\xC3 \xFF\xFEok \xE2\x82 end\xF0\x9F";
    const std::string repaired = utf8::sanitize(bad);
    INFO(name);
    CHECK(tokenizer.encode(bad) == tokenizer.encode(repaired));
    CHECK(tokenizer.decode(tokenizer.encode(bad)) == repaired);
  }
}

TEST_CASE("python_strip removes what Python's str.strip() removes") {
  CHECK(utf8::python_strip("  \t\nhi there\r\n ") == "hi there");
  CHECK(utf8::python_strip("\xC2\xA0\xE3\x80\x80x\xE2\x80\xA8") == "x");  // NBSP, ideographic space, U+2028
  CHECK(utf8::python_strip("\x1Fx\x1C") == "x");                          // Python counts U+001C..U+001F
  CHECK(utf8::python_strip("\xE2\x80\x8Bx") == "\xE2\x80\x8Bx");          // U+200B is not whitespace
  CHECK(utf8::python_strip("   ").empty());
}

// Text cut inside a character: fuzz_answer_parsers, trimming every byte prefix of an answer, found
// "\xC2" (U+0085's first byte) read as a whole white space past the view's end, and substr threw.
// Bytes that are no whole character are not white space, and nothing is read past the view.
TEST_CASE("trimming stops at bytes that are not a whole character and stays inside the text") {
  const std::string buffer = "\xC2\x85\xC2\x85";  // two U+0085 (white space); views cut into it
  const std::string_view nel_cut(buffer.data(), 1), nel(buffer.data(), 2), nel_and_cut(buffer.data(), 3);
  CHECK(utf8::trim_white_space(nel_cut, true, true) == nel_cut);
  CHECK(utf8::trim_white_space(nel, true, true).empty());
  CHECK(utf8::trim_white_space(nel_and_cut, true, false) == nel_and_cut.substr(2));
  CHECK(utf8::trim_white_space(nel_and_cut, false, true) == nel_and_cut);
  CHECK(utf8::python_strip(nel_cut) == nel_cut);
  CHECK(utf8::python_strip(nel_and_cut) == nel_and_cut.substr(2));
  CHECK(utf8::trim_white_space(" \x85 ", true, true) == "\x85");            // a stray continuation byte
  CHECK(utf8::trim_white_space("\xE2\x80 ", true, true) == "\xE2\x80");     // U+2028 cut short
  CHECK(utf8::trim_white_space(" \xC2\x85\x85", true, true) == "\x85");  // NEL, then a stray byte
  CHECK(utf8::trim_white_space("\xE2\x80\xA8x\xE2\x80\xA8", true, true) == "x");  // whole U+2028 still trims
  CHECK(utf8::python_strip("\xFF \x1F") == "\xFF");
}
