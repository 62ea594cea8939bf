// Every generated kernels.cu compiles with NVRTC for the architectures its config targets, and for
// compute_80 PTX (the portable target: no Hopper-only instructions outside guards). No GPU needed.
#include <catch2/catch.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
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
// compiled here: their sm_90a compiles were a quarter of this test's time (CI's 2 cores). Of the
// others, the largest of each family (by hidden size: Llama-3.1-8B, Qwen3-8B, DeepSeek-V2) compiles
// its one-GPU build for its configured architectures, ptxas included; the rest, and every
// tensor-parallel build (tp<N>/), for those architectures' PTX (compute_90a: the front end and the
// Hopper code paths) without ptxas, which was 80% of such a compile: ptxas sees the same templates
// in the family's largest build, at larger shapes, and in the tiny models' nvcc builds. (With
// ptxas for every model, DeepSeek-V2-Lite's, Qwen3-0.6B's and Llama-3.2-1B's sm_90a compiles took
// 354, 141 and 134 of the test's 1,707 job-seconds on 2 cores, 2026-12-07.) Nothing runs what NVRTC
// makes here, so it compiles fast rather than optimizing (-Ofc=max: the same front end, intrinsics
// and ptxas checks; DeepSeek-V2-Lite's kernels 7x faster for compute_80 and 1.7x for sm_90a).
TEST_CASE("every generated kernels.cu compiles with NVRTC") {
  const fs::path root = KILN_SOURCE_DIR;
  std::set<std::string> built_by_nvcc;
  for (std::string_view list = KILN_NVCC_MODELS; !list.empty();) {
    const size_t end = std::min(list.find(','), list.size());
    built_by_nvcc.emplace(list.substr(0, end));
    list.remove_prefix(std::min(end + 1, list.size()));
  }
  // The models to compile, and the largest of each family among those nvcc did not build.
  struct Model {
    fs::path folder;
    std::string name;
    kiln::codegen::ModelSpec spec;
  };
  std::vector<Model> models;
  for (const auto& entry : fs::directory_iterator(root / "generated")) {
    if (!fs::exists(entry.path() / "kernels.cu")) continue;
    const std::string name = entry.path().filename().string();
    models.push_back({entry.path(), name, kiln::codegen::load_config((root / "configs" / (name + ".yaml")).string())});
  }
  std::map<kiln::codegen::Family, std::pair<int64_t, std::string>> largest;  // family -> (hidden size, name)
  for (const Model& m : models) {
    if (built_by_nvcc.contains(m.name)) continue;
    auto [at, fresh] = largest.try_emplace(m.spec.family, m.spec.hidden_size, m.name);
    if (!fresh && std::pair(m.spec.hidden_size, m.name) > at->second) at->second = {m.spec.hidden_size, m.name};
  }
  std::vector<Job> jobs;
  for (const Model& m : models) {
    // The model's kernels and each tensor-parallel build's (tp<N>/kernels.cu).
    std::vector<fs::path> folders = {m.folder};
    for (int64_t ranks : m.spec.build.tensor_parallel) folders.push_back(m.folder / ("tp" + std::to_string(ranks)));
    for (const fs::path& folder : folders) {
      const fs::path kernels = folder / "kernels.cu";
      REQUIRE(fs::exists(kernels));
      const std::string text = read(kernels);
      if (!built_by_nvcc.contains(m.name)) {
        const bool real = folder == m.folder && largest.at(m.spec.family).second == m.name;
        for (const std::string& arch : m.spec.build.gpu_archs) {
          jobs.push_back({folder, kernels, text, real ? arch : "compute_" + arch.substr(3), {}});
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
  CHECK(!models.empty());
}
