// The strict JSON layer (runtime/core/strict_json.hpp) and the file checks under it.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <string>

#include "runtime/core/error.hpp"
#include "runtime/core/file_io.hpp"
#include "runtime/core/strict_json.hpp"
#include "tests/support/temp_dir.hpp"

using kiln::parse_json_strict;
using Catch::Contains;

TEST_CASE("strict JSON: documents parse as nlohmann parses them") {
  const auto j = parse_json_strict(R"({"a": [1, -2, 3.5, "x", true, null, {"b": {}}], "c": 18446744073709551615})", "t");
  CHECK(j["a"].size() == 7);
  CHECK(j["a"][1] == -2);
  CHECK(j["a"][6]["b"].is_object());
  CHECK(j["c"].get<uint64_t>() == 18446744073709551615ull);
  CHECK(parse_json_strict("7", "t") == 7);
  CHECK(parse_json_strict(R"("s")", "t") == "s");
  // The same key in different objects is fine.
  CHECK(parse_json_strict(R"({"a": {"k": 1}, "b": {"k": 2}})", "t")["b"]["k"] == 2);
}

TEST_CASE("strict JSON: duplicate keys, deep nesting, overflowing numbers and bad syntax name the origin") {
  CHECK_THROWS_WITH(parse_json_strict(R"({"a": 1, "a": 2})", "f.json"), Contains("f.json") && Contains("duplicate JSON key \"a\""));
  CHECK_THROWS_WITH(parse_json_strict(R"({"o": {"x": [], "x": {}}})", "f.json"), Contains("duplicate JSON key \"x\""));
  std::string deep(kiln::kJsonMaxDepth + 1, '[');
  deep += std::string(kiln::kJsonMaxDepth + 1, ']');
  CHECK_THROWS_WITH(parse_json_strict(deep, "f.json"), Contains("f.json") && Contains("nested deeper than 64"));
  std::string ok(kiln::kJsonMaxDepth, '[');
  ok += std::string(kiln::kJsonMaxDepth, ']');
  CHECK_NOTHROW(parse_json_strict(ok, "f.json"));
  CHECK_THROWS_WITH(parse_json_strict(std::string(1000000, '['), "f.json"), Contains("nested deeper"));
  CHECK_THROWS_WITH(parse_json_strict("[1e400]", "f.json"), Contains("f.json") && Contains("not valid JSON"));
  CHECK_THROWS_WITH(parse_json_strict("{\"a\": }", "f.json"), Contains("f.json") && Contains("not valid JSON"));
  CHECK_THROWS_WITH(parse_json_strict("", "f.json"), Contains("not valid JSON"));
  CHECK_THROWS_WITH(parse_json_strict("{} {}", "f.json"), Contains("not valid JSON"));
  CHECK_THROWS_AS(parse_json_strict(std::string("\"\xff\""), "f.json"), kiln::Error);  // invalid UTF-8
}

TEST_CASE("strict JSON: typed reads never narrow") {
  const auto j = parse_json_strict(R"([4294967297, -1, 2.0, 18446744073709551615, 9223372036854775807, "3", 1e300])", "t");
  CHECK(kiln::json_integer(j[0]) == 4294967297);
  CHECK_FALSE(kiln::json_integer(j[0], 0, INT32_MAX));
  CHECK(kiln::json_integer(j[1]) == -1);
  CHECK_FALSE(kiln::json_integer(j[1], 0));
  CHECK_FALSE(kiln::json_integer(j[2]));  // a float, even an integral one
  CHECK_FALSE(kiln::json_integer(j[3]));  // beyond int64
  CHECK(kiln::json_integer(j[4]) == INT64_MAX);
  CHECK_FALSE(kiln::json_integer(j[5]));
  CHECK(kiln::json_unsigned(j[3]) == UINT64_MAX);
  CHECK_FALSE(kiln::json_unsigned(j[1]));
  CHECK_FALSE(kiln::json_unsigned(j[2]));
  CHECK(kiln::json_number(j[2]) == 2.0);
  CHECK(kiln::json_number(j[0]) == 4294967297.0);
  CHECK(kiln::json_number(j[6]) == 1e300);
  CHECK_FALSE(kiln::json_number(j[5]));
  CHECK(kiln::json_excerpt(parse_json_strict("[\"" + std::string(500, 'x') + "\"]", "t")).size() == 83);
}

TEST_CASE("read_file refuses what is not a regular file, and files over the limit") {
  const kiln::test::TempDir dir("kiln-file-io");
  CHECK_THROWS_WITH(kiln::read_file(dir.path().string()), Contains("not a regular file (a directory)"));
  const std::string fifo = dir.file("fifo");
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(kiln::read_file(fifo), Contains(fifo) && Contains("a FIFO"));  // at once, without a writer
  CHECK_THROWS_WITH(kiln::read_file("/dev/zero"), Contains("not a regular file"));
  const std::string big = dir.write("big.json", std::string(2000, ' '));
  CHECK_THROWS_WITH(kiln::read_file(big, 1000), Contains(big) && Contains("2000 bytes; expected at most 1000"));
  CHECK(kiln::read_file(big).size() == 2000);
  CHECK_THROWS_WITH(kiln::read_file(dir.file("missing")), Contains("missing") && Contains("cannot open"));
}
