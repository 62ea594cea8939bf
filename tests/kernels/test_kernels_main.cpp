// test_kernels_gpu: every kernel template against the CPU reference, with timings.
//   test_kernels_gpu [group...]   groups: elementwise gemv attention gemm invariance fusion (default: all)
// Exits 77 (ctest: skipped) when no CUDA device is present, 1 on any failure.
#include "tests/kernels/test_groups.hpp"
#include "tests/support/gpu_harness.hpp"

int main(int argc, char** argv) {
  using namespace kiln::kernel_test;
  return run_test_groups("test_kernels_gpu", argc, argv,
                         {{"elementwise", run_elementwise_tests},
                          {"gemv", run_gemv_tests},
                          {"attention", run_attention_tests},
                          {"gemm", run_gemm_tests},
                          {"invariance", run_invariance_tests},
                          {"fusion", run_fusion_tests}});
}
