// Issue 13: the crafted-input corpus (corpus/, written by corpus/make_corpus.py, listed in
// corpus/MANIFEST). Every file is fed to the loader it targets, through the program a user runs
// (a model binary, kilnc), and must be refused with exit code 1, no signal, no hang, and exactly
// one line of output that names the file (or the model directory holding it) and what was
// expected.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/run_command.hpp"
#include "tests/support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kCorpus = fs::path(KILN_SOURCE_DIR) / "tests/hardening/corpus";
const fs::path kGoodConfig = fs::path(KILN_SOURCE_DIR) / "tests/golden/tiny-llama/config.json";

struct Case {
  std::string loader, file, expect;
};

std::vector<Case> manifest() {
  std::ifstream in(kCorpus / "MANIFEST");
  std::vector<Case> cases;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Case c;
    std::getline(fields, c.loader, '\t');
    std::getline(fields, c.file, '\t');
    std::getline(fields, c.expect);
    cases.push_back(c);
  }
  return cases;
}

// A model directory in `dir` whose `name` is the case's file; the rest valid.
fs::path model_dir(const kiln::test::TempDir& dir, const Case& c, const std::string& name) {
  const fs::path model = dir.path() / c.file;
  fs::create_directories(model);
  if (name != "config.json") fs::copy_file(kGoodConfig, model / "config.json");
  if (c.loader == "index") {
    // A valid shard holding tensor "x" (f32 [1]) for the index to point at.
    std::ofstream shard(model / "s1.safetensors", std::ios::binary);
    const std::string header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
    const uint64_t length = header.size();
    shard.write(reinterpret_cast<const char*>(&length), 8).write(header.data(), static_cast<std::streamsize>(length));
    shard.write("\0\0\x80\x3f", 4);
  }
  fs::copy_file(kCorpus / c.loader / c.file, model / name);
  return model;
}

}  // namespace

TEST_CASE("every crafted input is refused with exit code 1 and one line naming the file") {
  const std::vector<Case> cases = manifest();
  REQUIRE(cases.size() >= 80);
  const std::string binary = std::string(KILN_TINY_LLAMA) + " --backend ref ";
  for (const Case& c : cases) {
    const kiln::test::TempDir dir("kiln-corpus");
    const std::string file = (kCorpus / c.loader / c.file).string();
    std::string command, named = file;
    if (c.loader == "safetensors" || c.loader == "index" || c.loader == "config") {
      const std::string name = c.loader == "safetensors" ? "model.safetensors"
                               : c.loader == "index"     ? "model.safetensors.index.json"
                                                         : "config.json";
      named = model_dir(dir, c, name).string();
      command = binary + "--model " + named + " --prompt-ids 1 --max-tokens 1";
    } else if (c.loader == "gguf") {
      command = binary + "--gguf " + file + " --prompt-ids 1 --max-tokens 1";
    } else if (c.loader == "tokenizer") {
      command = binary + "--random-weights 1 --tokenizer " + file + " --prompt hi --max-tokens 1";
    } else if (c.loader == "kilnc") {
      command = std::string(KILN_KILNC) + " " + file + " --print-name";
    } else if (c.loader == "requests") {
      command = binary + "--random-weights 1 --prompts-file " + file;
      named = file + ":1:";
    } else {
      FAIL("MANIFEST names an unknown loader: " << c.loader);
    }
    const kiln::test::CommandResult r = kiln::test::run_command_limited(command, 60);
    std::vector<std::string> lines;
    std::istringstream output(r.output);
    for (std::string line; std::getline(output, line);) {
      if (!line.empty()) lines.push_back(line);
    }
    INFO(c.loader << "/" << c.file << ": " << command << "\n-> exit " << r.exit_code << ", signal " << r.signal
                  << (r.timed_out ? ", timed out" : "") << "\n" << r.output);
    CHECK_FALSE(r.timed_out);
    CHECK(r.signal == 0);
    CHECK(r.exit_code == 1);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find(named) != std::string::npos);
    CHECK(lines[0].find(c.expect) != std::string::npos);
  }
}
