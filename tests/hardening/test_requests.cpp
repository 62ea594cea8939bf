// Issue 13: hostile JSONL request lines (defect 3), and sampled ids the tokenizer lacks.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>

#include "tests/hardening/hostile_cli.hpp"

using namespace kiln::test;
using nlohmann::json;

// Defect 3: numbers were narrowed to the field's type (token 4294967297 ran as token 1, top_k
// 4294967296 as 0, max_tokens 4294967298 as 2) and a repeated key kept its last value.
TEST_CASE("JSONL requests: out-of-range numbers and repeated keys are errors naming the line and field") {
  const TempDir dir("kiln-hostile");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"prompt_ids": [4294967297], "max_tokens": 1})", "prompt_ids"},
      {R"({"prompt_ids": [5], "top_k": 4294967296, "max_tokens": 1})", "top_k"},
      {R"({"prompt_ids": [5], "max_tokens": 4294967298})", "max_tokens"},
      {R"({"prompt_ids": [5], "max_tokens": 2, "max_tokens": 3})", "duplicate"},
      {R"({"prompt_ids": [5], "max_tokens": 1, "temperature": 1e400})", "JSON"},
      {R"({"prompt_ids": [5], "max_tokens": 1, "seed": -1})", "seed"},
      {R"({"prompt_ids": [5.0], "max_tokens": 1})", "prompt_ids"},
      {R"({"prompt_ids": [5], "max_tokens": 1, "stop_token_ids": [18446744073709551615]})", "stop_token_ids"},
      {R"({"prompt_ids": [5], "max_tokens": 1, "temperature": "hot"})", "temperature"},
  };
  std::string lines = R"({"prompt_ids": [5, 6], "max_tokens": 2, "temperature": 0})" "\n";
  for (const auto& [line, field] : bad) lines += line + "\n";
  const std::string requests = dir.write("requests.jsonl", lines);
  const CommandResult r = tiny_llama("--random-weights 1 --prompts-file " + requests + " -q");
  CHECK(r.exit_code == 1);
  for (size_t i = 0; i < bad.size(); ++i) {
    INFO("line " << i + 2 << ": " << bad[i].first);
    const std::string where = requests + ":" + std::to_string(i + 2) + ": ";
    const size_t at = r.output.find(where);
    REQUIRE(at != std::string::npos);
    const std::string message = r.output.substr(at, r.output.find('\n', at) - at);
    CHECK(contains(message, bad[i].second));
  }
  CHECK_FALSE(contains(r.output, "internal error"));
}

// Stop strings are bounded (kMaxStopStrings, kMaxStopBytes: each is followed over every token and
// copied into every choice), on the command line as in the server's requests.
TEST_CASE("stop strings past their limits on the command line (--stop): one line naming the limit, exit 1") {
  std::string many;
  for (int i = 0; i <= 1024; ++i) many += " --stop x" + std::to_string(i);
  const std::string base = "--random-weights 1 --prompt-ids 1,2 -n 2 -q";
  for (const auto& [args, expected] : std::vector<std::pair<std::string, std::string>>{
           {many, "stop holds 1025 strings: expected at most 1024"},
           {" --stop " + std::string(40000, 'a') + " --stop " + std::string(30000, 'b'),
            "stop holds 70000 bytes of strings: expected at most 65536 in all"}}) {
    const CommandResult r = tiny_llama(base + args);
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(contains(r.output, expected));
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
}

// Found while testing defect 2: a model whose vocabulary is larger than its tokenizer's (tiny-qwen3:
// 512 rows, this tokenizer: 259 tokens; Qwen3: 151,936 and 151,669) failed the whole run when it
// sampled a padding id ("token id 327 is outside the vocabulary"). Padding ids have no text.
TEST_CASE("sampled ids beyond the tokenizer's vocabulary decode to nothing, in text and streaming") {
  const TempDir dir("kiln-hostile");
  const std::string base = "--random-weights 1 --tokenizer " + write_chatml_tokenizer(dir) +
                           " --prompt-ids 5,6,7 --max-tokens 64 --ignore-eos --temperature 1 --seed 3 ";
  const CommandResult json_run = tiny_qwen3(base + "--output-format json");
  REQUIRE(json_run.exit_code == 0);
  const json ids = report_of(json_run)["requests"][0]["output_ids"];
  CHECK(std::any_of(ids.begin(), ids.end(), [](const json& id) { return id.get<int>() >= 259; }));
  CHECK(tiny_qwen3(base).exit_code == 0);
  CHECK(tiny_qwen3(base + "--stream").exit_code == 0);
}
