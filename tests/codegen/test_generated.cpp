// generated/ is the generator's output, committed: regenerating every config must reproduce it
// byte for byte (and nothing else may be in it). Edit a generated file and this fails.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "codegen/config_load.hpp"
#include "codegen/emit.hpp"

using namespace kiln::codegen;
namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// "line N" of the first difference, with both lines, for the failure message.
std::string first_difference(const std::string& want, const std::string& have) {
  size_t line = 1, start = 0;
  for (size_t i = 0; i < std::min(want.size(), have.size()); ++i) {
    if (want[i] != have[i]) {
      const size_t end_w = want.find('\n', start), end_h = have.find('\n', start);
      return "line " + std::to_string(line) + ": generated  «" + want.substr(start, end_w - start) + "»\n  committed «" +
             have.substr(start, end_h - start) + "»";
    }
    if (want[i] == '\n') {
      ++line;
      start = i + 1;
    }
  }
  return "lengths differ: generated " + std::to_string(want.size()) + " bytes, committed " + std::to_string(have.size());
}

}  // namespace

TEST_CASE("regenerating every config reproduces generated/ byte for byte") {
  const fs::path root = KILN_SOURCE_DIR;
  std::set<std::string> expected_dirs;
  for (const auto& entry : fs::directory_iterator(root / "configs")) {
    if (entry.path().extension() != ".yaml") continue;
    ModelSpec spec = load_config(entry.path().string());
    spec.source = "configs/" + entry.path().filename().string();  // as `kilnc configs/x.yaml` writes it
    expected_dirs.insert(spec.name);
    const fs::path dir = root / "generated" / spec.name;
    INFO("config " << spec.source << " -> generated/" << spec.name << " (run: build/bin/kilnc " << spec.source << ")");
    REQUIRE(fs::is_directory(dir));
    std::set<std::string> names;
    for (const GeneratedFile& f : emit_model(spec)) {
      names.insert(f.name);
      INFO("file " << f.name);
      REQUIRE(fs::exists(dir / f.name));
      const std::string committed = read(dir / f.name);
      if (committed != f.text) FAIL("generated/" << spec.name << "/" << f.name << " differs, " << first_difference(f.text, committed));
    }
    for (const auto& file : fs::recursive_directory_iterator(dir)) {
      if (file.is_directory()) continue;  // a tensor-parallel build's folder: its files are listed
      INFO("stray file " << file.path());
      CHECK(names.count(fs::relative(file.path(), dir).generic_string()) == 1);
    }
  }
  for (const auto& entry : fs::directory_iterator(root / "generated")) {
    INFO("generated/" << entry.path().filename().string() << " has no config in configs/");
    CHECK(expected_dirs.count(entry.path().filename().string()) == 1);
  }
}

// --profile's per-op table divides each op's bytes by its time: a projection kept in a GGUF file's
// blocks must be counted in that format's bytes, known when the step runs, not in bf16's.
TEST_CASE("the decode marks every projection with its matrix's bytes in the format it was kept in") {
  const fs::path root = KILN_SOURCE_DIR;
  int marks = 0;
  for (const auto& entry : fs::directory_iterator(root / "configs")) {
    if (entry.path().extension() != ".yaml") continue;
    for (const GeneratedFile& f : emit_model(load_config(entry.path().string()))) {
      if (fs::path(f.name).filename() != "forward.cu") continue;
      std::istringstream lines(f.text);
      std::string line, call;
      while (std::getline(lines, line)) {
        const size_t start = line.find_first_not_of(' ');
        if (start == std::string::npos) continue;
        if (line.compare(start, 10, "ctx.mark(\"") == 0 && call.rfind("linear_", 0) == 0) {
          INFO(entry.path().filename().string() << " " << f.name << ": " << call << "\n  " << line);
          CHECK(line.find("kiln::matrix_bytes(") != std::string::npos);
          CHECK(line.find(".format, ") == std::string::npos);  // the GpuMatrix: both parts of one in two formats
          ++marks;
        }
        call = line.substr(start);
      }
    }
  }
  CHECK(marks > 100);  // every model's projections, prefill's marks excluded (it has none)
}
