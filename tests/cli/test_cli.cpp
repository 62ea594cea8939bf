// The generated binary's command line, end to end on the CPU backend (tiny-llama, random weights):
// JSON output, prompts files, the error cases of issue 4 (one clear line, exit code != 0, other
// requests still run) and the JSON accounting fields.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/weights/safetensors.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/temp_dir.hpp"

using kiln::test::CommandResult;
using kiln::test::TempDir;

namespace {

CommandResult run(const std::string& args) {
  return kiln::test::run_command(std::string(KILN_TINY_LLAMA) + " --backend ref --random-weights 3 " + args);
}

}  // namespace

TEST_CASE("greedy generation with JSON output") {
  const CommandResult r = run("--prompt-ids 5,6,7 --max-tokens 4 --temperature 0 --output-format json");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  CHECK(j["requests"][0]["output_ids"].size() == 4);
  CHECK(j["requests"][0]["prompt_ids"] == nlohmann::json::array({5, 6, 7}));
  CHECK(j["counts"]["output_tokens"] == 4);
  CHECK(j["decode_bytes_per_step"]["weights"].get<double>() > 0);
  CHECK(j["decode_bytes_per_step"]["per_gpu"] == j["decode_bytes_per_step"]["total"]);  // one device
  // The run's wall time covers its steps (it read 0 when the CLI drove the engine step by step).
  CHECK(j["timings"]["wall_s"].get<double>() >= j["timings"]["prefill_s"].get<double>() + j["timings"]["decode_s"].get<double>());
  CHECK(j["timings"]["wall_s"].get<double>() > 0);
  CHECK(j["counts"]["swapped_out"] == 0);
  CHECK(j["backend"] == "ref");
}

// --batch-invariant changes what the GPU's steps past 64 sequences run; the CPU backends' sums never
// depend on the batch, so there the flag is accepted and the tokens are the same.
TEST_CASE("the --batch-invariant flag is accepted and changes nothing on the CPU backends") {
  const std::string args = "--prompt-ids 5,6,7 --max-tokens 4 --temperature 0 --output-format json";
  const CommandResult plain = run(args), invariant = run(args + " --batch-invariant");
  INFO(plain.output << invariant.output);
  REQUIRE(plain.exit_code == 0);
  REQUIRE(invariant.exit_code == 0);
  const auto ids = [](const CommandResult& r) {
    return nlohmann::json::parse(r.output.substr(r.output.find('{')))["requests"][0]["output_ids"];
  };
  CHECK(ids(plain) == ids(invariant));
}

TEST_CASE("a prompt longer than the model's max context is rejected for that request") {
  std::string ids = "1";
  for (int i = 0; i < 600; ++i) ids += ",1";  // tiny-llama: max_context 512
  const CommandResult r = run("--prompt-ids " + ids + " --max-tokens 2");
  INFO(r.output);
  CHECK(r.exit_code != 0);
  CHECK(r.output.find("max") != std::string::npos);
  CHECK(r.output.find("512") != std::string::npos);
}

TEST_CASE("bad flags and sampling values give one clear line and a failing exit code") {
  for (const std::string& args : {"--prompt-ids 1,2 --max-tokens 0", "--prompt-ids 1,2 --top-p 1.5",
                                  "--prompt-ids 1,2 --min-p 1", "--prompt-ids 1,2 --temperature -1",
                                  "--prompt-ids 1,x,3", "--prompt-ids 1,99999", "--prompt-ids 1 --model /nonexistent"}) {
    const CommandResult r = run(args);
    INFO(args << " -> " << r.output);
    CHECK(r.exit_code != 0);
    CHECK(!r.output.empty());
  }
  const CommandResult ids = run("--prompt-ids 1,99999");
  CHECK(ids.output.find("99999") != std::string::npos);
  CHECK(ids.output.find("vocabulary") != std::string::npos);
}

TEST_CASE("quantizing to FP8 (--quantize fp8) runs on the reference backend and says so where it cannot run") {
  const CommandResult ok = run("--quantize fp8 --prompt-ids 5,6,7 --max-tokens 3 --temperature 0 --output-format json");
  INFO(ok.output);
  REQUIRE(ok.exit_code == 0);
  const auto j = nlohmann::json::parse(ok.output.substr(ok.output.find('{')));
  CHECK(j["requests"][0]["output_ids"].size() == 3);
  const CommandResult unknown = run("--quantize fp9 --prompt-ids 1,2");
  INFO(unknown.output);
  CHECK(unknown.exit_code != 0);
  CHECK(unknown.output.find("fp9") != std::string::npos);
  const CommandResult cpu = kiln::test::run_command(std::string(KILN_TINY_LLAMA) +
                                                    " --backend cpu --random-weights 3 --quantize fp8 --prompt-ids 1,2");
  INFO(cpu.output);
  CHECK(cpu.exit_code != 0);
  CHECK(cpu.output.find("--quantize fp8") != std::string::npos);
  CHECK(cpu.output.find("fast CPU backend") != std::string::npos);
}

TEST_CASE("a bad prompts-file line is named and the other requests still run") {
  const TempDir dir("kiln-cli");
  const std::string requests = dir.write("requests.jsonl",
                                         "{\"prompt_ids\": [5, 6], \"max_tokens\": 3, \"temperature\": 0}\n"
                                         "{\"prompt_ids\": [5, 6], \"max_tokens\": 3, \"top_p\": 2}\n"
                                         "this is not json\n"
                                         "{\"prompt_ids\": [7], \"max_tokens\": 2, \"temperature\": 0, \"colour\": 1}\n"
                                         "{\"prompt_ids\": [8, 9, 10], \"max_tokens\": 2, \"seed\": 4}\n");
  const std::string output = dir.file("results.jsonl");
  const CommandResult r = run("--prompts-file " + requests + " --output " + output);
  INFO(r.output);
  CHECK(r.exit_code == 1);  // some requests failed
  CHECK(r.output.find(requests + ":2") != std::string::npos);
  CHECK(r.output.find("top_p") != std::string::npos);
  CHECK(r.output.find(requests + ":3") != std::string::npos);
  CHECK(r.output.find(requests + ":4") != std::string::npos);
  CHECK(r.output.find("colour") != std::string::npos);
  std::ifstream in(output);
  std::string line;
  int ok = 0, failed = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    (j.contains("error") ? failed : ok) += 1;
  }
  CHECK(ok == 2);
  CHECK(failed == 3);
}

TEST_CASE("structured output from the command line: --json-schema, --grammar, and a prompts file's fields") {
  const TempDir dir("kiln-cli");
  const std::string tok = std::string(" --tokenizer ") + KILN_TINY_TOKENIZER + " ";
  const auto texts = [](const CommandResult& r) {
    const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    std::vector<nlohmann::json> out;
    for (const auto& q : j["requests"]) out.push_back(q);
    return out;
  };
  for (int seed = 0; seed < 4; ++seed) {
    const CommandResult r = run(tok + "-p hi -n 80 --temp 1 -s " + std::to_string(seed) + " --output-format json -q " +
                                "-j '{\"type\":\"array\",\"items\":{\"enum\":[true,7]},\"minItems\":2,\"maxItems\":3}'");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto q = texts(r).at(0);
    CHECK(q["finish_reason"] == "eos");  // the JSON ended, then only EOS was allowed
    const auto v = nlohmann::json::parse(q["text"].get<std::string>());
    REQUIRE(v.is_array());
    CHECK(v.size() >= 2);
    CHECK(v.size() <= 3);
    for (const auto& x : v) CHECK((x == true || x == 7));
  }
  const std::string grammar = dir.write("g.gbnf", "root ::= \"v\" digit digit\ndigit ::= [0-9]\n");
  const std::string requests = dir.write(
      "requests.jsonl",
      "{\"prompt\": \"a\", \"max_tokens\": 300, \"json_schema\": {\"type\": \"object\", \"properties\": {\"z\": {\"type\": \"null\"}, \"a\": {\"type\": \"boolean\"}}, \"required\": [\"z\", \"a\"]}}\n"
      "{\"prompt\": \"b\", \"max_tokens\": 20, \"grammar\": \"root ::= [xy]{4}\"}\n"
      "{\"prompt\": \"c\", \"json_schema\": {\"type\": \"string\", \"format\": \"email\"}}\n"
      "{\"prompt\": \"d\", \"grammar\": \"root ::= \\\"a\\\"\", \"min_tokens\": 2}\n"
      "{\"prompt\": \"e\"}\n");
  const CommandResult r = run(tok + "--prompts-file " + requests + " --temp 1 -s 5 --output-format json -q --grammar-file " + grammar);
  INFO(r.output);
  CHECK(r.exit_code == 1);  // two lines fail
  const auto q = texts(r);
  REQUIRE(q.size() == 5);
  const auto obj = nlohmann::ordered_json::parse(q[0]["text"].get<std::string>());
  CHECK(obj.size() == 2);
  CHECK(obj.begin().key() == "z");  // the line's key order, not nlohmann's sorted one
  CHECK(q[1]["text"].get<std::string>().find_first_not_of("xy") == std::string::npos);
  CHECK(q[1]["text"].get<std::string>().size() == 4);
  CHECK_THAT(q[2]["error"].get<std::string>(), Catch::Contains(":3: json_schema: /format: 'format' \"email\""));
  CHECK_THAT(q[3]["error"].get<std::string>(), Catch::Contains("min_tokens"));
  const std::string e = q[4]["text"].get<std::string>();  // the command line's grammar file
  CHECK(e.size() == 3);
  CHECK(e[0] == 'v');

  const CommandResult bad = run(tok + "-p hi --grammar 'root ::= root \"a\"'");
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.output, Catch::Contains("--grammar: grammar: rule 'root' is left-recursive"));
  const CommandResult two = run(tok + "-p hi --grammar 'root ::= \"a\"' -j '{}'");
  CHECK(two.exit_code != 0);
  const CommandResult no_tokenizer = run("--prompt-ids 5 -j '{}'");
  CHECK(no_tokenizer.exit_code != 0);
  CHECK_THAT(no_tokenizer.output, Catch::Contains("--json-schema needs a tokenizer"));
}

TEST_CASE("the same seed gives the same tokens, and sampling works without a seed") {
  const std::string args = "--prompt-ids 5,6,7 --max-tokens 8 --temperature 1 --top-p 0.9 --top-k 50 --output-format json";
  const CommandResult a = run(args + " --seed 11"), b = run(args + " --seed 11"), c = run(args);
  REQUIRE(a.exit_code == 0);
  REQUIRE(c.exit_code == 0);
  const auto ids = [](const CommandResult& r) {
    return nlohmann::json::parse(r.output.substr(r.output.find('{')))["requests"][0]["output_ids"];
  };
  CHECK(ids(a) == ids(b));
}

TEST_CASE("dump-logits writes the prompt's logits") {
  const TempDir dir("kiln-cli");
  const std::string path = dir.file("logits.safetensors");
  const CommandResult r = run("--prompt-ids 5,6,7,8 --max-tokens 1 --temperature 0 --dump-logits " + path + " -q");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const kiln::SafetensorsFile file(path);
  const kiln::TensorView* logits = file.find("logits");
  REQUIRE(logits != nullptr);
  CHECK(logits->dtype == kiln::DType::F32);
  CHECK(logits->shape == std::vector<int64_t>{4, 512});  // [prompt, vocab]
}

TEST_CASE("tensor-parallel DeepSeek-V2: the same tokens on 1, 2 and 4 simulated ranks, and what one GPU reads") {
  // --profile counts the routed experts chosen (every rank's together); per_gpu is one rank's
  // share: its heads and features, the weights every rank keeps whole, 1/ranks of the experts.
  nlohmann::json one;
  for (int ranks : {1, 2, 4}) {
    const CommandResult r = kiln::test::run_command(std::string(KILN_TINY_DEEPSEEK_V2) +
                                                    " --backend ref --random-weights 3 --prompt-ids 5,6,7,8 --max-tokens 6 "
                                                    "--temperature 0 --ignore-eos --profile --output-format json --tp " +
                                                    std::to_string(ranks));
    INFO(ranks << " ranks: " << r.output);
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    const auto& bytes = j["decode_bytes_per_step"];
    if (ranks == 1) {
      one = j;
      CHECK(bytes["per_gpu"] == bytes["total"]);
      continue;
    }
    CHECK(j["requests"][0]["output_ids"] == one["requests"][0]["output_ids"]);
    CHECK(bytes["routed_experts_read"] == one["decode_bytes_per_step"]["routed_experts_read"]);
    CHECK(bytes["per_gpu"].get<double>() < one["decode_bytes_per_step"]["per_gpu"].get<double>());
    CHECK(bytes["per_gpu"].get<double>() > one["decode_bytes_per_step"]["per_gpu"].get<double>() / ranks);  // whole copies
  }
}
