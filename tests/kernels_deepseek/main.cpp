// test_kernels_deepseek_gpu: the DeepSeek-V2 kernel templates against the CPU reference, with timings.
//   test_kernels_deepseek_gpu [group...]   groups: mla attention moe (default: all)
// Exits 77 (ctest: skipped) when no CUDA device is present, 1 on any failure.
#include "tests/kernels_deepseek/deepseek_groups.hpp"
#include "tests/support/gpu_harness.hpp"

int main(int argc, char** argv) {
  using namespace kiln::kernel_test;
  return run_test_groups("test_kernels_deepseek_gpu", argc, argv,
                         {{"mla", run_mla_tests}, {"attention", run_mla_attention_tests}, {"moe", run_moe_tests}});
}
