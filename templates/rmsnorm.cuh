// RMSNorm of every row of the fp32 residual stream into bf16 (ref::rmsnorm):
// out = x / sqrt(mean(x²) + eps) · weight, fp32 math, rounded to bf16 once. In the prefill, where
// the projection after it multiplies in FP8, the rows go out as that GEMM's FP8 inputs instead
// (templates/fp8_rows.hpp), made from the same bf16 values.
#pragma once

#include "templates/blocks/fp8_quantize.cuh"
#include "templates/blocks/row_norm.cuh"
#include "templates/common.cuh"
#include "templates/pending_sums.hpp"

#ifndef __CUDACC_RTC__
#include <stdexcept>
#include <string>
#endif

namespace kiln {

namespace detail {

// One block per row of `padded`: the rows past `rows` write zero codes with scale 1. A 128-column
// block of the row is one warp's (4 values a lane); with kRowScale the whole block's values share
// one scale (templates/fp8_rows.hpp).
template <int kDim, int kVec, int kThreads, bool kRowScale>
__global__ void __launch_bounds__(kThreads) rmsnorm_fp8_kernel(const float* __restrict__ x, const bf16* __restrict__ weight,
                                                               Fp8Rows out, int rows, int padded, float eps) {
  constexpr int kSteps = ceil_div(kDim, kThreads * kVec);
  static_assert(kDim % kFp8InputBlock == 0 && kVec * 32 == kFp8InputBlock, "rmsnorm_fp8: a warp per 128 columns");
  float w[kSteps][kVec];
  load_norm_weight<kDim, kVec, kThreads>(weight, w);
  pdl_release_and_wait();
  const int r = blockIdx.x;
  float y[kSteps][kVec] = {};
  if (r < rows) {  // the same for the whole block
    rmsnorm_row<kDim, kVec, kThreads>(x + static_cast<long long>(r) * kDim, w, eps, y);
  }
  float amax = 0.0f;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    round_to_bf16<kVec>(y[s]);
    amax = fmaxf(amax, fp8_amax<kVec>(y[s]));  // zeros past kDim
  }
  if constexpr (kRowScale) {
    __shared__ float scratch[kThreads / 32];
    const float scale = fp8_row_scale<kThreads>(amax, scratch);
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int i = row_column<kVec, kThreads>(s, threadIdx.x);
      if (i < kDim) store_fp8_codes<kVec>(y[s], scale, out.codes + static_cast<long long>(r) * kDim + i);
    }
    store_fp8_row_scale<kThreads>(scale, out, kDim, padded, r);
  } else {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int i = row_column<kVec, kThreads>(s, threadIdx.x);
      if (i < kDim) store_fp8_block_part<kVec>(y[s], out, kDim, padded, r, i);  // whole warps (kDim is whole blocks of 128)
    }
  }
}

// Thread `threadIdx.x`'s part of Σ_k row[k · count + i] over the splits k, split 0 first from
// 0.0f (gemv_sum_splits_kernel's order), in rmsnorm_load_row's layout. kSplits > 0: the count,
// every partial requested before the first add; 0: `splits`, in a loop.
template <int kDim, int kVec, int kThreads, int kSplits>
__device__ __forceinline__ void sum_row_splits(const float* row, long long count, int splits,
                                               float (&sum)[ceil_div(kDim, kThreads * kVec)][kVec]) {
  constexpr int kSteps = ceil_div(kDim, kThreads * kVec);
#pragma unroll
  for (int s = 0; s < kSteps; ++s)
#pragma unroll
    for (int j = 0; j < kVec; ++j) sum[s][j] = 0.0f;
  if constexpr (kSplits > 0) {
    float part[kSteps][kSplits][kVec];
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int i = row_column<kVec, kThreads>(s, threadIdx.x);
#pragma unroll
      for (int k = 0; k < kSplits; ++k) {
        if (i < kDim) load_f32<kVec>(row + k * count + i, part[s][k]);
      }
    }
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
#pragma unroll
      for (int k = 0; k < kSplits; ++k)
#pragma unroll
        for (int j = 0; j < kVec; ++j) sum[s][j] += part[s][k][j];
  } else {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int i = row_column<kVec, kThreads>(s, threadIdx.x);
      for (int k = 0; k < splits && i < kDim; ++k) {
        float part[kVec];
        load_f32<kVec>(row + k * count + i, part);
#pragma unroll
        for (int j = 0; j < kVec; ++j) sum[s][j] += part[j];
      }
    }
  }
}

// The decode's RMSNorm right after a residual projection that left its column splits' sums
// (PendingSums, rows [gridDim.x, kDim]): adds them into the row first — split 0 first, from 0.0f,
// then into the residual, as gemv_sum_splits_kernel does — stores the row, and normalizes the values
// it holds as rmsnorm_kernel does: the residual and the output have the bits of the two kernels.
// kSplits: the split count where it is one of the plans' usual ones, so that a thread requests all
// its partial sums at once (one block a row has a row's 16 × 8 KB to read: with a loop over a
// run-time count Llama-3.2-1B's norm took 3 µs more than the sums kernel and the norm together,
// H100); 0: `splits`, in a loop.
template <int kDim, int kVec, int kThreads, int kSplits>
__global__ void __launch_bounds__(kThreads) rmsnorm_sums_kernel(float* __restrict__ x, const float* __restrict__ partials,
                                                                int splits, const bf16* __restrict__ weight,
                                                                bf16* __restrict__ out, float eps) {
  constexpr int kSteps = ceil_div(kDim, kThreads * kVec);
  float w[kSteps][kVec];
  load_norm_weight<kDim, kVec, kThreads>(weight, w);
  pdl_release_and_wait();
  const long long r = blockIdx.x, count = static_cast<long long>(gridDim.x) * kDim;
  float sum[kSteps][kVec];
  sum_row_splits<kDim, kVec, kThreads, kSplits>(partials + r * kDim, count, splits, sum);
  float v[kSteps][kVec];
  rmsnorm_load_row<kDim, kVec, kThreads>(x + r * kDim, threadIdx.x, v);
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int i = row_column<kVec, kThreads>(s, threadIdx.x);
    if (i >= kDim) continue;
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[s][j] += sum[s][j];
    store_f32<kVec>(x + r * kDim + i, v[s]);
  }
  float y[kSteps][kVec];
  rmsnorm_held_row<kDim, kVec, kThreads>(v, w, eps, y);
  rmsnorm_store_row<kDim, kVec, kThreads>(out + r * kDim, y);
}

}  // namespace detail

template <shape::rmsnorm S>
void rmsnorm(const float* x, const bf16* weight, bf16* out, int rows, cudaStream_t stream) {
  static_assert(S.dim > 0, "rmsnorm: dim must be positive");
  if (rows <= 0) return;
  using Shape = detail::RmsnormShape<S.dim>;
  auto kernel = detail::rmsnorm_kernel<S.dim, Shape::kVec, Shape::kThreads, false>;
  KILN_LAUNCH(kernel, rows, Shape::kThreads, 0, stream, x, nullptr, weight, out, S.eps);
}

// The decode's call: `sums`, where not null and not empty, are a residual projection's split sums
// for the rows x (PendingSums::out; codegen pairs them: pair_pending_sums): added into x first, in
// this kernel, and emptied.
template <shape::rmsnorm S>
void rmsnorm(const float* x, const bf16* weight, bf16* out, int rows, PendingSums* sums, cudaStream_t stream) {
  if (sums == nullptr || !*sums) {
    rmsnorm<S>(x, weight, out, rows, stream);
    return;
  }
  const PendingSums p = *sums;
  *sums = {};
#ifndef __CUDACC_RTC__
  if (p.out != x || p.tokens != rows || p.n != S.dim) {
    throw std::logic_error("rmsnorm: the pending sums are of other rows (" + std::to_string(p.tokens) + " × " +
                           std::to_string(p.n) + ") than its " + std::to_string(rows) + " × " + std::to_string(S.dim));
  }
#endif
  if (rows <= 0) return;
  using Shape = detail::RmsnormShape<S.dim>;
  auto kernel = p.splits == 16  ? detail::rmsnorm_sums_kernel<S.dim, Shape::kVec, Shape::kThreads, 16>
                : p.splits == 8 ? detail::rmsnorm_sums_kernel<S.dim, Shape::kVec, Shape::kThreads, 8>
                                : detail::rmsnorm_sums_kernel<S.dim, Shape::kVec, Shape::kThreads, 0>;
  KILN_LAUNCH(kernel, rows, Shape::kThreads, 0, stream, p.out, p.partials, p.splits, weight, out, S.eps);
}

// The prefill's call: the bf16 rows `out`, or, where `out_fp8` is given, those rows' FP8 codes and
// scales in their place (`out` is then not written).
template <shape::rmsnorm S>
void rmsnorm(const float* x, const bf16* weight, bf16* out, Fp8Rows out_fp8, int rows, cudaStream_t stream) {
  // codegen pairs a norm only with an FP8-shaped projection (whole blocks of 512 columns), and
  // cuda::linear refuses FP8 inputs at any other shape.
  if constexpr (S.dim % kFp8InputBlock == 0) {
    if (out_fp8) {
      if (rows <= 0) return;
      using Shape = detail::RmsnormShape<S.dim>;
      auto kernel = out_fp8.row_scale ? detail::rmsnorm_fp8_kernel<S.dim, Shape::kVec, Shape::kThreads, true>
                                      : detail::rmsnorm_fp8_kernel<S.dim, Shape::kVec, Shape::kThreads, false>;
      const int padded = fp8_gemm_rows(rows);
      KILN_LAUNCH(kernel, padded, Shape::kThreads, 0, stream, x, weight, out_fp8, rows, padded, S.eps);
      return;
    }
  }
  rmsnorm<S>(x, weight, out, rows, stream);
}

}  // namespace kiln
