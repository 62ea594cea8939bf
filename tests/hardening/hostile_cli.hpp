// Running model binaries on hostile input for the tests of issue 13 (tests/hardening): every
// case must end with one line naming the file, field or flag, and an exit code (1 for bad input; 2
// is "internal error"), never with a signal or a hang.
#pragma once

#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/chatml_tokenizer.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/temp_dir.hpp"

namespace kiln::test {

inline constexpr double kCommandTimeout = 120;

// Runs `binary --backend ref args`; fails the test on a signal or a hang.
inline CommandResult run_binary(const std::string& binary, const std::string& args) {
  const CommandResult r = run_command_limited(binary + " --backend ref " + args, kCommandTimeout);
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

// tests/support/chatml_tokenizer.hpp's tokenizer, written to `dir`; returns its path.
inline std::string write_chatml_tokenizer(const TempDir& dir) {
  return dir.write("chatml/tokenizer.json", chatml_tokenizer_json().dump());
}

}  // namespace kiln::test
