// Every generated kernels.cu compiles with NVRTC for the architectures its config targets, and for
// compute_80 PTX (the portable target: no Hopper-only instructions outside guards). No GPU needed.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codegen/config_load.hpp"
#include "tests/support/nvrtc_compile.hpp"

namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("every generated kernels.cu compiles with NVRTC") {
  const fs::path root = KILN_SOURCE_DIR;
  int models = 0;
  for (const auto& entry : fs::directory_iterator(root / "generated")) {
    if (!fs::exists(entry.path() / "kernels.cu")) continue;
    ++models;
    const std::string name = entry.path().filename().string();
    const auto spec = kiln::codegen::load_config((root / "configs" / (name + ".yaml")).string());
    // The model's kernels and each tensor-parallel build's (tp<N>/kernels.cu).
    std::vector<fs::path> folders = {entry.path()};
    for (int64_t ranks : spec.build.tensor_parallel) folders.push_back(entry.path() / ("tp" + std::to_string(ranks)));
    for (const fs::path& folder : folders) {
      const fs::path kernels = folder / "kernels.cu";
      const std::string where = fs::relative(kernels, root).generic_string();
      REQUIRE(fs::exists(kernels));
      // Each wrapper in kernels.cu must instantiate at least one kernel.
      const std::string text = read(kernels);
      const size_t wrappers = count(text, "\nvoid ");
      for (const std::string& arch : spec.build.gpu_archs) {
        INFO(where << " for " << arch);
        const auto c = kiln::test::nvrtc_compile(text, kernels.string(), arch, {folder.string()});
        INFO(c.log);
        CHECK(c.ok);
        CHECK(c.cubin_bytes > 0);
      }
      INFO(where << " for compute_80 PTX");
      const auto ptx = kiln::test::nvrtc_compile(text, kernels.string(), "compute_80", {folder.string()});
      INFO(ptx.log);
      REQUIRE(ptx.ok);
      const size_t entries = count(ptx.ptx, ".entry ");
      CHECK(entries >= wrappers);
    }
  }
  CHECK(models > 0);
}
