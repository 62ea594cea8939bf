// test_kernels_gpu: every kernel template against the CPU reference, with timings.
//   test_kernels_gpu [group...]   groups: elementwise gemv attention gemm invariance fusion (default: all)
// Exits 77 (ctest: skipped) when no CUDA device is present, 1 on any failure.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tests/kernels/gpu_harness.hpp"
#include "tests/kernels/test_groups.hpp"

int main(int argc, char** argv) {
  using namespace kiln::kernel_test;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no GPU: skipped\n");
    return 77;
  }
  cudaDeviceProp prop{};
  KILN_CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

  const std::vector<std::pair<const char*, std::function<void()>>> groups = {
      {"elementwise", run_elementwise_tests},
      {"gemv", run_gemv_tests},
      {"attention", run_attention_tests},
      {"gemm", run_gemm_tests},
      {"invariance", run_invariance_tests},
      {"fusion", run_fusion_tests},
  };
  for (int i = 1; i < argc; ++i) {
    bool known = false;
    for (const auto& g : groups) known |= std::strcmp(argv[i], g.first) == 0;
    if (!known) {
      std::printf("unknown group '%s' (expected elementwise, gemv, attention, gemm, invariance or fusion)\n", argv[i]);
      return 2;
    }
  }
  for (const auto& [name, run] : groups) {
    bool selected = argc == 1;
    for (int i = 1; i < argc; ++i) selected |= std::strcmp(argv[i], name) == 0;
    if (!selected) continue;
    std::printf("---- %s ----\n", name);
    run();
  }
  if (failures() > 0) {
    std::printf("test_kernels_gpu: %d FAILED checks\n", failures());
    return 1;
  }
  std::printf("test_kernels_gpu: all checks passed\n");
  return 0;
}
