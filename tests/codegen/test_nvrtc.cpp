// Every generated kernels.cu compiles with NVRTC for the architectures its config targets, and for
// compute_80 PTX (the portable target: no Hopper-only instructions outside guards). No GPU needed.
#include <catch2/catch.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <string_view>
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
  double seconds = 0;
};

}  // namespace

// The compiles run on every core (NVRTC compiles independent programs concurrently), longest
// first; the checks follow in order. The models this tree builds (KILN_NVCC_MODELS) had every
// kernels.cu compiled by nvcc for their configured architectures, so only their compute_80 PTX is
// compiled here: their sm_90a compiles were a quarter of this test's time (CI's 2 cores). The
// other models' tensor-parallel builds (tp<N>/) compile for their architectures' PTX (compute_90a:
// the front end and the Hopper code paths) without ptxas, which was 80% of such a compile: ptxas
// sees the same templates in each model's one-GPU build, at larger shapes, and in the tiny models'
// tensor-parallel builds. Nothing runs what NVRTC makes here, so it compiles fast rather than
// optimizing (-Ofc=max: the same front end, intrinsics and ptxas checks; DeepSeek-V2-Lite's kernels
// 7x faster for compute_80 and 1.7x for sm_90a).
TEST_CASE("every generated kernels.cu compiles with NVRTC") {
  const fs::path root = KILN_SOURCE_DIR;
  std::set<std::string> built_by_nvcc;
  for (std::string_view list = KILN_NVCC_MODELS; !list.empty();) {
    const size_t end = std::min(list.find(','), list.size());
    built_by_nvcc.emplace(list.substr(0, end));
    list.remove_prefix(std::min(end + 1, list.size()));
  }
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
      if (!built_by_nvcc.contains(name)) {
        const bool one_gpu = folder == entry.path();
        for (const std::string& arch : spec.build.gpu_archs) {
          jobs.push_back({folder, kernels, text, one_gpu ? arch : "compute_" + arch.substr(3), {}});
        }
      }
      jobs.push_back({folder, kernels, text, "compute_80", {}});
    }
  }
  // Longer sources and real architectures (ptxas runs too) take longer.
  std::stable_sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) {
    const auto cost = [](const Job& j) { return j.text.size() * (j.arch.starts_with("compute_") ? 2 : 3); };
    return cost(a) > cost(b);
  });
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t) {
    workers.emplace_back([&] {
      for (size_t i; (i = next++) < jobs.size();) {
        Job& j = jobs[i];
        const auto start = std::chrono::steady_clock::now();
        j.result = kiln::test::nvrtc_compile(j.text, j.kernels.string(), j.arch, {j.folder.string()}, {"-Ofc=max"});
        j.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    });
  }
  for (std::thread& w : workers) w.join();
  for (const Job& j : jobs) {
    std::printf("nvrtc: %6.1f s %s for %s\n", j.seconds, fs::relative(j.kernels, root).generic_string().c_str(),
                j.arch.c_str());
  }
  for (const Job& j : jobs) {
    INFO(fs::relative(j.kernels, root).generic_string() << " for " << j.arch);
    INFO(j.result.log);
    CHECK(j.result.ok);
    if (!j.arch.starts_with("compute_")) {
      CHECK(j.result.cubin_bytes > 0);
      continue;
    }
    // Each wrapper in kernels.cu must instantiate at least one kernel.
    CHECK(count(j.result.ptx, ".entry ") >= count(j.text, "\nvoid "));
  }
  CHECK(models > 0);
}
