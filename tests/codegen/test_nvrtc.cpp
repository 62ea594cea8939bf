// Every generated kernels.cu compiles with NVRTC for the architectures its config targets, and for
// compute_80 PTX (the portable target: no Hopper-only instructions outside guards). No GPU needed.
#include <catch2/catch.hpp>
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
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

// One compile: a kernels.cu for one target.
struct Job {
  fs::path folder, kernels;
  std::string text, arch;
  kiln::test::NvrtcResult result;
};

}  // namespace

// The compiles run on every core (NVRTC compiles independent programs concurrently); the checks
// follow in order.
TEST_CASE("every generated kernels.cu compiles with NVRTC") {
  const fs::path root = KILN_SOURCE_DIR;
  int models = 0;
  std::vector<Job> jobs;
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
      REQUIRE(fs::exists(kernels));
      const std::string text = read(kernels);
      for (const std::string& arch : spec.build.gpu_archs) jobs.push_back({folder, kernels, text, arch, {}});
      jobs.push_back({folder, kernels, text, "compute_80", {}});
    }
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t) {
    workers.emplace_back([&] {
      for (size_t i; (i = next++) < jobs.size();) {
        Job& j = jobs[i];
        j.result = kiln::test::nvrtc_compile(j.text, j.kernels.string(), j.arch, {j.folder.string()});
      }
    });
  }
  for (std::thread& w : workers) w.join();
  for (const Job& j : jobs) {
    INFO(fs::relative(j.kernels, root).generic_string() << " for " << j.arch);
    INFO(j.result.log);
    CHECK(j.result.ok);
    if (j.arch != "compute_80") {
      CHECK(j.result.cubin_bytes > 0);
      continue;
    }
    // Each wrapper in kernels.cu must instantiate at least one kernel.
    CHECK(count(j.result.ptx, ".entry ") >= count(j.text, "\nvoid "));
  }
  CHECK(models > 0);
}
