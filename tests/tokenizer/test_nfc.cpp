// NFC normalization against Python's unicodedata (tests/tokenizer/gen/gen_nfc_cases.py).
#include <catch2/catch.hpp>

#include "runtime/tokenizer/unicode_nfc.hpp"
#include "tests/tokenizer/tokenizer_test_util.hpp"

using namespace kiln;

TEST_CASE("to_nfc matches unicodedata.normalize('NFC') and the quick check never lies") {
  const auto expected = test::read_json(test::tokenizer_test_dir() + "/fixtures/nfc_cases.json");
  REQUIRE(expected.at("cases").size() > 500);
  for (const auto& item : expected.at("cases")) {
    const std::string input = item[0].get<std::string>();
    const std::string nfc = item[1].get<std::string>();
    INFO("input: \"" << input << "\"");
    CHECK(to_nfc(input) == nfc);
    if (nfc_quick_check(input)) CHECK(input == nfc);
    CHECK(to_nfc(nfc) == nfc);
  }
  CHECK(nfc_quick_check("plain ASCII and caf\xC3\xA9"));
  CHECK_FALSE(nfc_quick_check("cafe\xCC\x81"));
}
