// Running model binaries on hostile input for the tests of issue 13 (tests/hardening): every
// case must end with one line naming the file, field or flag, and an exit code (1 for bad input; 2
// is "internal error"), never with a signal or a hang.
#pragma once

#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/tokenizer/byte_level.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/temp_dir.hpp"

namespace kiln::test {

inline constexpr double kCommandTimeout = 120;

// Runs `binary --backend cpu args`; fails the test on a signal or a hang.
inline CommandResult run_binary(const std::string& binary, const std::string& args) {
  const CommandResult r = run_command_limited(binary + " --backend cpu " + args, kCommandTimeout);
  INFO(args << "\n-> exit " << r.exit_code << ", signal " << r.signal << "\n" << r.output);
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.signal == 0);
  return r;
}
inline CommandResult tiny_llama(const std::string& args) { return run_binary(KILN_TINY_LLAMA, args); }
inline CommandResult tiny_qwen3(const std::string& args) { return run_binary(KILN_TINY_QWEN3, args); }

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The JSON document of --output-format json (after any log lines).
inline nlohmann::json report_of(const CommandResult& r) {
  const size_t at = r.output.find("{\n");
  INFO(r.output);
  REQUIRE(at != std::string::npos);
  return nlohmann::json::parse(r.output.substr(at));
}

// A copy of the tiny-llama golden model directory (HF config.json + model.safetensors) in `dir`.
inline std::string copy_tiny_llama_dir(const TempDir& dir) {
  namespace fs = std::filesystem;
  const fs::path to = dir.path() / "model";
  fs::copy(fs::path(KILN_SOURCE_DIR) / "tests/golden/tiny-llama", to, fs::copy_options::recursive);
  fs::remove(to / "golden.safetensors");
  return to.string();
}

// A byte-level BPE tokenizer.json in `dir` of 256 byte tokens (id = byte) plus ChatML's markers
// <|im_start|> 256, <|im_end|> 257 and <|endoftext|> 258: small enough for tiny-qwen3's 512 rows.
inline std::string write_chatml_tokenizer(const TempDir& dir) {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::byte_to_text(static_cast<uint8_t>(b))] = b;
  json added = json::array();
  int id = 256;
  for (const char* marker : {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}) {
    added.push_back({{"id", id++}, {"content", marker}, {"special", true}, {"normalized", false}});
  }
  const json tokenizer = {
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
  return dir.write("chatml/tokenizer.json", tokenizer.dump());
}

}  // namespace kiln::test
