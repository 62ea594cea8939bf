// Batch invariance: a token's projection must come out bit for bit the same whatever else shares
// its step — our decode GEMV at any batch size, and cuBLASLt's prefill GEMM at any row count.
// That is what makes a request's greedy output equal running it alone (issue 4's serving check).
#include <cstring>
#include <string>

#include "runtime/cuda/gemm.hpp"
#include "templates/gemv.cuh"
#include "tests/kernels/gpu_harness.hpp"
#include "tests/kernels/test_groups.hpp"

namespace kiln::kernel_test {

namespace {

// Rows [first, first + count) of `whole` equal `part` bit for bit.
template <typename T>
bool same_bits(const std::vector<T>& whole, const std::vector<T>& part, size_t first, size_t width) {
  return std::memcmp(whole.data() + first * width, part.data(), part.size() * sizeof(T)) == 0;
}

template <int kN, int kK, GemvOut kOut>
void gemv_invariance(const char* name) {
  using Out = typename detail::GemvOutType<kOut>::type;
  std::mt19937 rng(kN * 31 + kK);
  constexpr int kTokens = 64;
  DeviceBuffer<uint16_t> weight(random_bf16(static_cast<size_t>(kN) * kK, rng, 0.05f));
  DeviceBuffer<uint16_t> in(random_bf16(static_cast<size_t>(kTokens) * kK, rng));
  const std::vector<float> start = random_f32(static_cast<size_t>(kTokens) * kN, rng);  // residual (add_f32)
  auto run = [&](int first, int count) {
    DeviceBuffer<Out> out(static_cast<size_t>(count) * kN);
    if constexpr (kOut == GemvOut::add_f32) {
      out.upload(std::vector<float>(start.begin() + first * kN, start.begin() + (first + count) * kN));
    } else {
      out.poison();
    }
    gemv<kN, kK, kOut>(as_bf16(in) + static_cast<long long>(first) * kK, as_bf16(weight), out.get(), count, nullptr);
    KILN_CUDA_OK(cudaDeviceSynchronize());
    return out.download();
  };
  const auto all = run(0, kTokens);
  bool ok = true;
  for (int batch : {1, 5, 33}) {
    for (int first = 0; first + batch <= kTokens; first += batch) ok &= same_bits(all, run(first, batch), first, kN);
  }
  expect(ok, std::string("gemv ") + name + ": each token's output identical at batch 1, 5, 33 and 64");
}

void gemm_invariance(cuda::GemmRunner& runner, int n, int k, cuda::GemmOut mode, const char* name) {
  std::mt19937 rng(n * 7 + k);
  const int rows = 2048;
  DeviceBuffer<uint16_t> weight(random_bf16(static_cast<size_t>(n) * k, rng, 0.05f));
  DeviceBuffer<uint16_t> in(random_bf16(static_cast<size_t>(rows) * k, rng));
  const size_t out_bytes = mode == cuda::GemmOut::store_bf16 ? 2 : 4;
  auto run = [&](int first, int count) {
    DeviceBuffer<uint8_t> out(static_cast<size_t>(count) * n * out_bytes);
    KILN_CUDA_OK(cudaMemset(out.get(), 0, out.size()));
    runner.run(as_bf16(in) + static_cast<long long>(first) * k, as_bf16(weight), out.get(), count, n, k, mode, nullptr);
    KILN_CUDA_OK(cudaDeviceSynchronize());
    return out.download();
  };
  const auto all = run(0, rows);
  bool ok = true;
  for (const auto& [first, count] : {std::pair{0, 1}, {5, 1}, {100, 7}, {300, 64}, {1000, 513}}) {
    ok &= same_bits(all, run(first, count), static_cast<size_t>(first), static_cast<size_t>(n) * out_bytes);
  }
  expect(ok, std::string("gemm ") + name + ": each row's output identical at 1, 7, 64, 513 and 2048 rows");
}

}  // namespace

void run_invariance_tests() {
  gemv_invariance<3072, 2048, GemvOut::store_bf16>("3072x2048 store_bf16");
  gemv_invariance<2048, 8192, GemvOut::add_f32>("2048x8192 add_f32");
  gemv_invariance<960, 576, GemvOut::store_bf16>("960x576 store_bf16");
  gemv_invariance<4096, 1024, GemvOut::store_bf16>("4096x1024 store_bf16");
  gemv_invariance<151936, 1024, GemvOut::store_f32>("151936x1024 store_f32");
  gemv_invariance<200, 144, GemvOut::add_f32>("200x144 add_f32");
  cuda::GemmRunner runner;
  gemm_invariance(runner, 3072, 2048, cuda::GemmOut::store_bf16, "3072x2048 store_bf16");
  gemm_invariance(runner, 2048, 8192, cuda::GemmOut::add_f32, "2048x8192 add_f32");
  gemm_invariance(runner, 4096, 1024, cuda::GemmOut::store_bf16, "4096x1024 store_bf16");
  gemm_invariance(runner, 960, 576, cuda::GemmOut::store_bf16, "960x576 store_bf16");
  gemm_invariance(runner, 151936, 1024, cuda::GemmOut::store_f32, "151936x1024 store_f32");
}

}  // namespace kiln::kernel_test
