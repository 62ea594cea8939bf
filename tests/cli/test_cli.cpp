// The generated binary's command line, end to end on the CPU backend (tiny-llama, random weights):
// JSON output, prompts files, the error cases of issue 4 (one clear line, exit code != 0, other
// requests still run) and the JSON accounting fields.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/weights/safetensors.hpp"

namespace {

struct Result {
  int exit_code;
  std::string out;  // stdout and stderr together
};

Result run(const std::string& args) {
  const std::string cmd = std::string(KILN_TINY_LLAMA) + " --backend cpu --random-weights 3 " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string temp_file(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("kiln-cli-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace

TEST_CASE("greedy generation with JSON output") {
  const Result r = run("--prompt-ids 5,6,7 --max-tokens 4 --temperature 0 --output-format json");
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  CHECK(j["requests"][0]["output_ids"].size() == 4);
  CHECK(j["requests"][0]["prompt_ids"] == nlohmann::json::array({5, 6, 7}));
  CHECK(j["counts"]["output_tokens"] == 4);
  CHECK(j["decode_bytes_per_step"]["weights"].get<double>() > 0);
  CHECK(j["backend"] == "cpu");
}

TEST_CASE("a prompt longer than the model's max context is rejected for that request") {
  std::string ids = "1";
  for (int i = 0; i < 600; ++i) ids += ",1";  // tiny-llama: max_context 512
  const Result r = run("--prompt-ids " + ids + " --max-tokens 2");
  INFO(r.out);
  CHECK(r.exit_code != 0);
  CHECK(r.out.find("max") != std::string::npos);
  CHECK(r.out.find("512") != std::string::npos);
}

TEST_CASE("bad flags and sampling values give one clear line and a failing exit code") {
  for (const std::string& args : {"--prompt-ids 1,2 --max-tokens 0", "--prompt-ids 1,2 --top-p 1.5",
                                  "--prompt-ids 1,2 --min-p 1", "--prompt-ids 1,2 --temperature -1",
                                  "--prompt-ids 1,x,3", "--prompt-ids 1,99999", "--prompt-ids 1 --model /nonexistent"}) {
    const Result r = run(args);
    INFO(args << " -> " << r.out);
    CHECK(r.exit_code != 0);
    CHECK(!r.out.empty());
  }
  const Result ids = run("--prompt-ids 1,99999");
  CHECK(ids.out.find("99999") != std::string::npos);
  CHECK(ids.out.find("vocabulary") != std::string::npos);
}

TEST_CASE("a bad prompts-file line is named and the other requests still run") {
  const std::string requests = temp_file("requests.jsonl",
                                         "{\"prompt_ids\": [5, 6], \"max_tokens\": 3, \"temperature\": 0}\n"
                                         "{\"prompt_ids\": [5, 6], \"max_tokens\": 3, \"top_p\": 2}\n"
                                         "this is not json\n"
                                         "{\"prompt_ids\": [7], \"max_tokens\": 2, \"temperature\": 0, \"colour\": 1}\n"
                                         "{\"prompt_ids\": [8, 9, 10], \"max_tokens\": 2, \"seed\": 4}\n");
  const std::string output = temp_file("results.jsonl", "");
  const Result r = run("--prompts-file " + requests + " --output " + output);
  INFO(r.out);
  CHECK(r.exit_code == 1);  // some requests failed
  CHECK(r.out.find(requests + ":2") != std::string::npos);
  CHECK(r.out.find("top_p") != std::string::npos);
  CHECK(r.out.find(requests + ":3") != std::string::npos);
  CHECK(r.out.find(requests + ":4") != std::string::npos);
  CHECK(r.out.find("colour") != std::string::npos);
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

TEST_CASE("the same seed gives the same tokens, and sampling works without a seed") {
  const std::string args = "--prompt-ids 5,6,7 --max-tokens 8 --temperature 1 --top-p 0.9 --top-k 50 --output-format json";
  const Result a = run(args + " --seed 11"), b = run(args + " --seed 11"), c = run(args);
  REQUIRE(a.exit_code == 0);
  REQUIRE(c.exit_code == 0);
  const auto ids = [](const Result& r) {
    return nlohmann::json::parse(r.out.substr(r.out.find('{')))["requests"][0]["output_ids"];
  };
  CHECK(ids(a) == ids(b));
}

TEST_CASE("dump-logits writes the prompt's logits") {
  const std::string path = temp_file("logits.safetensors", "");
  const Result r = run("--prompt-ids 5,6,7,8 --max-tokens 1 --temperature 0 --dump-logits " + path + " -q");
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  const kiln::SafetensorsFile file(path);
  const kiln::TensorView* logits = file.find("logits");
  REQUIRE(logits != nullptr);
  CHECK(logits->dtype == kiln::DType::F32);
  CHECK(logits->shape == std::vector<int64_t>{4, 512});  // [prompt, vocab]
}
