// silu_mul (templates/silu_mul.cuh) against ref::silu_mul: silu(gate) · up over gate | up rows.
#include "runtime/ref/ops.hpp"
#include "templates/silu_mul.cuh"
#include "tests/kernels/fp8_inputs.hpp"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {
namespace {

template <shape::silu_mul S>
void check_silu_mul(int rows) {
  std::mt19937 rng(7000 + S.dim + rows);
  const auto gate_up = random_bf16(static_cast<size_t>(rows) * 2 * S.dim, rng, 3.0f);
  DeviceBuffer<uint16_t> d_in(gate_up), d_out(static_cast<size_t>(rows) * S.dim);
  d_out.poison();
  kiln::silu_mul<S>(as_bf16(d_in), as_bf16_mut(d_out), rows, nullptr);
  const std::string what = "silu_mul dim " + std::to_string(S.dim) + " rows " + std::to_string(rows);
  check_launch(what);
  std::vector<float> ref(static_cast<size_t>(rows) * S.dim);
  ref::silu_mul(S, bf16_to_f32(gate_up).data(), ref.data(), rows);
  check_close(what, ref, bf16_to_f32(d_out.download()), kBf16Limit);
  kiln::silu_mul<S>(as_bf16(d_in), as_bf16_mut(d_out), 0, nullptr);
  check_launch(what + ", 0 rows");
}

// The prefill's silu_mul with FP8 inputs for the projection after it (templates/fp8_rows.hpp).
template <shape::silu_mul S>
void check_silu_mul_fp8(int rows) {
  std::mt19937 rng(7100 + S.dim + rows);
  const auto gate_up = random_bf16(static_cast<size_t>(rows) * 2 * S.dim, rng, 3.0f);
  DeviceBuffer<uint16_t> d_in(gate_up), d_out(static_cast<size_t>(rows) * S.dim);
  check_fp8_output(
      "silu_mul to FP8, dim " + std::to_string(S.dim) + " rows " + std::to_string(rows), rows, S.dim, d_out,
      [&] { kiln::silu_mul<S>(as_bf16(d_in), as_bf16_mut(d_out), rows, nullptr); },
      [&](Fp8Rows fp8) { kiln::silu_mul<S>(as_bf16(d_in), as_bf16_mut(d_out), fp8, rows, nullptr); });
}

}  // namespace

TEST_CASE("silu_mul writes FP8 inputs in place of its rows", "[silu_mul]") {
  check_silu_mul_fp8<llama1b::kSiluMulAct>(1);   // three zero rows of padding
  check_silu_mul_fp8<llama1b::kSiluMulAct>(300);
  check_silu_mul_fp8<shape::silu_mul{.dim = 12288}>(5);  // Qwen3-8B's
  check_silu_mul_fp8<shape::silu_mul{.dim = 384}>(2);    // 48 lanes a row: a row's end inside a warp
}

TEST_CASE("silu_mul multiplies silu(gate) by up", "[silu_mul]") {
  check_silu_mul<llama1b::kSiluMulAct>(1);
  check_silu_mul<llama1b::kSiluMulAct>(2048);
  check_silu_mul<smollm2::kSiluMulAct>(64);
  check_silu_mul<dsv2lite::kSiluMulMoeAct>(6 * 64);  // a token's 6 experts, 64 tokens
  check_silu_mul<shape::silu_mul{.dim = 200}>(33);    // 8-byte vectors
  check_silu_mul<shape::silu_mul{.dim = 999}>(7);     // scalar
}

}  // namespace kiln::kernel_test
