// SwiGLU activation: act[t, i] = silu(gate[t, i]) · up[t, i], rows of gate_up = [gate dim | up dim]
// (ref::silu_mul). fp32 math from the bf16 inputs, rounded once (HF rounds silu(g) to bf16 before
// the product; we keep fp32, which is closer to the exact value). In the prefill, where the
// projection after it multiplies in FP8, the rows go out as that GEMM's FP8 inputs instead
// (templates/fp8_rows.hpp), made from the same bf16 values.
#pragma once

#include "templates/blocks/fp8_quantize.cuh"
#include "templates/common.cuh"

namespace kiln {

namespace detail {

// silu(gate) · up of one feature, in fp32 (the whole-step decode kernel and the MoE gate|up GEMM's
// epilogue compute the same value). The exponential and the division are the hardware's
// approximations (ex2.approx, rcp.approx: a few ulp of fp32, far inside the bf16 rounding that
// follows; silu(gate) is -0 once exp(-gate) overflows, as it should be): expf and an IEEE division
// made the prefill's silu·mul bound by its arithmetic (Qwen3-8B's 2,048 × 12,288 into FP8 inputs
// 52.3 -> 42.0 µs, with the FP8 codes' products 32.9; into bf16 rows 40.2 -> 38.1: H200,
// bench/RESULTS.md 2026-11-28 sixteenth session).
__device__ __forceinline__ float silu_mul_value(float gate, float up) {
  return __fdividef(gate, 1.0f + __expf(-gate)) * up;
}

// silu(gate) · up of a feature from its gate and up projections' fp32 sums, each first rounded to
// bf16 as the projection stores it: rounded to bf16 in turn, the bits of the projection's bf16 rows
// then silu_mul (the GEMV's SwiGLU epilogue, linear_act.cuh, and the MoE gate|up kernels use it).
__device__ __forceinline__ float silu_mul_of_sums(float gate, float up) {
  return silu_mul_value(__bfloat162float(__float2bfloat16_rn(gate)), __bfloat162float(__float2bfloat16_rn(up)));
}

// kVec features of row t from feature i.
template <int kDim, int kVec>
__device__ __forceinline__ void silu_mul_vector(const bf16* gate_up, long long t, int i, float (&out)[kVec]) {
  const bf16* g = gate_up + t * 2 * kDim + i;
  float gate[kVec], up[kVec];
  load_bf16<kVec>(g, gate);
  load_bf16<kVec>(g + kDim, up);
#pragma unroll
  for (int j = 0; j < kVec; ++j) out[j] = silu_mul_value(gate[j], up[j]);
}

template <int kDim, int kVec>
__global__ void __launch_bounds__(kElementwiseThreads) silu_mul_kernel(const bf16* __restrict__ gate_up, bf16* __restrict__ act,
                                                       long long vectors) {
  pdl_release_and_wait();
  constexpr int kPerRow = kDim / kVec;
  const long long item = static_cast<long long>(blockIdx.x) * kElementwiseThreads + threadIdx.x;
  if (item >= vectors) return;
  const long long t = item / kPerRow;
  const int i = static_cast<int>(item % kPerRow) * kVec;
  float out[kVec];
  silu_mul_vector<kDim, kVec>(gate_up, t, i, out);
  store_bf16<kVec>(act + t * kDim + i, out);
}

// The same over `padded` rows into FP8 codes: the 128 / kVec aligned lanes of a 128-column block
// share its scale; the rows past `rows` write zero codes with scale 1. `vectors` covers whole rows,
// so a block's lanes are all in or all out.
template <int kDim, int kVec>
__global__ void __launch_bounds__(kElementwiseThreads)
    silu_mul_fp8_kernel(const bf16* __restrict__ gate_up, Fp8Rows act, int rows, int padded, long long vectors) {
  static_assert(kDim % kFp8InputBlock == 0 && kFp8InputBlock / kVec <= 32, "silu_mul_fp8: a block within a warp");
  pdl_release_and_wait();
  constexpr int kPerRow = kDim / kVec;
  const long long item = static_cast<long long>(blockIdx.x) * kElementwiseThreads + threadIdx.x;
  if (item >= vectors) return;
  const long long t = item / kPerRow;
  const int i = static_cast<int>(item % kPerRow) * kVec;
  float out[kVec] = {};
  if (t < rows) {
    silu_mul_vector<kDim, kVec>(gate_up, t, i, out);
    round_to_bf16<kVec>(out);
  }
  store_fp8_block_part<kVec>(out, act, kDim, padded, t, i);
}

// The same with one scale per row (Fp8Rows::row_scale): a block per row of `padded`, the row in
// registers until its largest value is known. At most 512 threads (Qwen3-8B's 12,288 features: 3
// vectors of 8 a thread).
template <int kDim, int kVec>
struct SiluMulRowsShape {
  static constexpr int kThreads = min_int(512, round_up(kDim / kVec, 32));
  static constexpr int kSteps = ceil_div(kDim / kVec, kThreads);
};

template <int kDim, int kVec>
__global__ void __launch_bounds__(SiluMulRowsShape<kDim, kVec>::kThreads)
    silu_mul_fp8_rows_kernel(const bf16* __restrict__ gate_up, Fp8Rows act, int rows, int padded) {
  using Shape = SiluMulRowsShape<kDim, kVec>;
  pdl_release_and_wait();
  const long long t = blockIdx.x;
  float out[Shape::kSteps][kVec] = {};
  float amax = 0.0f;
#pragma unroll
  for (int s = 0; s < Shape::kSteps; ++s) {
    const int i = (s * Shape::kThreads + static_cast<int>(threadIdx.x)) * kVec;
    if (t < rows && i < kDim) {
      silu_mul_vector<kDim, kVec>(gate_up, t, i, out[s]);
      round_to_bf16<kVec>(out[s]);
      amax = fmaxf(amax, fp8_amax<kVec>(out[s]));
    }
  }
  __shared__ float scratch[Shape::kThreads / 32];
  const float scale = fp8_row_scale<Shape::kThreads>(amax, scratch);
#pragma unroll
  for (int s = 0; s < Shape::kSteps; ++s) {
    const int i = (s * Shape::kThreads + static_cast<int>(threadIdx.x)) * kVec;
    if (i < kDim) store_fp8_codes<kVec>(out[s], scale, act.codes + t * kDim + i);
  }
  store_fp8_row_scale<Shape::kThreads>(scale, act, kDim, padded, t);
}

}  // namespace detail

template <shape::silu_mul S>
void silu_mul(const bf16* gate_up, bf16* act, int rows, cudaStream_t stream) {
  constexpr int kDim = S.dim;
  static_assert(kDim > 0, "silu_mul: dim must be positive");
  if (rows <= 0) return;
  constexpr int kVec = detail::vec_width(kDim, 2);  // gate, up and act rows all start at multiples of kDim
  const long long vectors = static_cast<long long>(rows) * (kDim / kVec);
  const int blocks = static_cast<int>(detail::ceil_div_ll(vectors, detail::kElementwiseThreads));
  auto kernel = detail::silu_mul_kernel<kDim, kVec>;
  KILN_LAUNCH(kernel, blocks, detail::kElementwiseThreads, 0, stream, gate_up, act, vectors);
}

// The prefill's call: the bf16 rows `act`, or, where `act_fp8` is given, those rows' FP8 codes and
// scales in their place (`act` is then not written).
template <shape::silu_mul S>
void silu_mul(const bf16* gate_up, bf16* act, Fp8Rows act_fp8, int rows, cudaStream_t stream) {
  // codegen pairs silu·mul only with an FP8-shaped projection (whole blocks of 512 columns), and
  // cuda::linear refuses FP8 inputs at any other shape.
  if constexpr (S.dim % kFp8InputBlock == 0) {
    if (act_fp8) {
      if (rows <= 0) return;
      constexpr int kVec = detail::vec_width(S.dim, 2);
      const int padded = fp8_gemm_rows(rows);
      if (act_fp8.row_scale) {
        auto kernel = detail::silu_mul_fp8_rows_kernel<S.dim, kVec>;
        constexpr int kThreads = detail::SiluMulRowsShape<S.dim, kVec>::kThreads;
        KILN_LAUNCH(kernel, padded, kThreads, 0, stream, gate_up, act_fp8, rows, padded);
        return;
      }
      const long long vectors = static_cast<long long>(padded) * (S.dim / kVec);
      const int blocks = static_cast<int>(detail::ceil_div_ll(vectors, detail::kElementwiseThreads));
      auto kernel = detail::silu_mul_fp8_kernel<S.dim, kVec>;
      KILN_LAUNCH(kernel, blocks, detail::kElementwiseThreads, 0, stream, gate_up, act_fp8, rows, padded, vectors);
      return;
    }
  }
  silu_mul<S>(gate_up, act, rows, stream);
}

}  // namespace kiln
