// rmsnorm (templates/rmsnorm.cuh) against ref::rmsnorm: every row of the fp32 residual stream.
#include "runtime/ref/ops.hpp"
#include "templates/rmsnorm.cuh"
#include "tests/kernels/fp8_inputs.hpp"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {
namespace {

template <shape::rmsnorm S>
void check_rmsnorm(int rows) {
  std::mt19937 rng(2000 + S.dim + rows);
  const auto x = random_f32(static_cast<size_t>(rows) * S.dim, rng, 3.0f);
  const auto weight = random_bf16(S.dim, rng);
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<uint16_t> d_w(weight), d_out(static_cast<size_t>(rows) * S.dim);
  d_out.poison();
  kiln::rmsnorm<S>(d_x.get(), as_bf16(d_w), as_bf16_mut(d_out), rows, nullptr);
  const std::string what = "rmsnorm dim " + std::to_string(S.dim) + " rows " + std::to_string(rows);
  check_launch(what);
  std::vector<float> ref(static_cast<size_t>(rows) * S.dim);
  ref::rmsnorm(S, x.data(), bf16_to_f32(weight).data(), ref.data(), rows);
  check_close(what, ref, bf16_to_f32(d_out.download()), kBf16Limit);
  kiln::rmsnorm<S>(d_x.get(), as_bf16(d_w), as_bf16_mut(d_out), 0, nullptr);
  check_launch(what + ", 0 rows");
}

// The prefill's rmsnorm with FP8 inputs for the projection after it (templates/fp8_rows.hpp).
template <shape::rmsnorm S>
void check_rmsnorm_fp8(int rows) {
  std::mt19937 rng(2100 + S.dim + rows);
  const auto x = random_f32(static_cast<size_t>(rows) * S.dim, rng, 3.0f);
  const auto weight = random_bf16(S.dim, rng);
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<uint16_t> d_w(weight), d_out(static_cast<size_t>(rows) * S.dim);
  check_fp8_output(
      "rmsnorm to FP8, dim " + std::to_string(S.dim) + " rows " + std::to_string(rows), rows, S.dim, d_out,
      [&] { kiln::rmsnorm<S>(d_x.get(), as_bf16(d_w), as_bf16_mut(d_out), rows, nullptr); },
      [&](Fp8Rows fp8) { kiln::rmsnorm<S>(d_x.get(), as_bf16(d_w), as_bf16_mut(d_out), fp8, rows, nullptr); });
}

}  // namespace

TEST_CASE("rmsnorm writes FP8 inputs in place of its rows", "[rmsnorm]") {
  check_rmsnorm_fp8<llama1b::kRmsnorm2048>(1);     // three zero rows of padding
  check_rmsnorm_fp8<llama1b::kRmsnorm2048>(2048);
  check_rmsnorm_fp8<qwen06::kRmsnorm1024>(7);
  check_rmsnorm_fp8<shape::rmsnorm{.dim = 8192, .eps = 1e-5f}>(6);  // a 128-column block a warp in each of 8 steps
}

TEST_CASE("rmsnorm normalizes every row", "[rmsnorm]") {
  check_rmsnorm<llama1b::kRmsnorm2048>(1);
  check_rmsnorm<llama1b::kRmsnorm2048>(2048);
  check_rmsnorm<qwen06::kRmsnorm1024>(64);
  check_rmsnorm<smollm2::kRmsnorm576>(7);
  check_rmsnorm<shape::rmsnorm{.dim = 200, .eps = 1e-5f}>(300);   // 2-float vectors
  check_rmsnorm<shape::rmsnorm{.dim = 999, .eps = 1e-6f}>(5);     // scalar loads, a partial warp
  check_rmsnorm<shape::rmsnorm{.dim = 8192, .eps = 1e-5f}>(4);    // more than one value per thread
}

}  // namespace kiln::kernel_test
