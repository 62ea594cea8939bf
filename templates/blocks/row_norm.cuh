// The pieces every RMSNorm kernel shares (rmsnorm, rmsnorm_rows, rmsnorm_inplace, attention_prep),
// so that a kernel which folds a norm into its work computes the same float operations in the same
// order as the plain one: 1 / sqrt(mean(x²) + eps), then x · scale · weight, fp32 math rounded to
// bf16 once.
#pragma once

#include "templates/common.cuh"

namespace kiln::detail {

// The first of the kVec columns thread `thread` of a kThreads-wide row block holds at step s (a
// row of kDim columns takes ceil_div(kDim, kThreads · kVec) steps; the last may end past kDim).
template <int kVec, int kThreads>
__device__ __forceinline__ int row_column(int s, unsigned thread) {
  return (s * kThreads + static_cast<int>(thread)) * kVec;
}

// 1 / sqrt(mean(x²) + eps) of a row of `dim` values whose sum of squares is `sum_sq`.
__device__ __forceinline__ float rms_scale(float sum_sq, int dim, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(dim) + eps);
}

// y = x · scale · weight, left to right (the product is rounded to bf16 by the caller).
template <int kVec>
__device__ __forceinline__ void rms_apply(const float (&x)[kVec], float scale, const float (&w)[kVec],
                                          float (&y)[kVec]) {
#pragma unroll
  for (int j = 0; j < kVec; ++j) y[j] = x[j] * scale * w[j];
}

// The same part of Σx² over values the thread already holds, in rmsnorm_partial_sum_sq's layout.
template <int kDim, int kVec, int kThreads>
__device__ __forceinline__ float rmsnorm_held_sum_sq(const float (&v)[ceil_div(kDim, kThreads * kVec)][kVec],
                                                     unsigned thread) {
  constexpr int kSteps = ceil_div(kDim, kThreads * kVec);
  float sum_sq = 0.0f;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    if (row_column<kVec, kThreads>(s, thread) < kDim) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) sum_sq += v[s][j] * v[s][j];
    }
  }
  return sum_sq;
}

// Thread `thread` of a kThreads-wide rmsnorm block: loads its values of the fp32 row into v and
// returns its part of Σx². rmsnorm adds the parts with block_sum (warp butterflies, then the warps
// in order).
template <int kDim, int kVec, int kThreads>
__device__ __forceinline__ void rmsnorm_load_row(const float* row, unsigned thread,
                                                 float (&v)[ceil_div(kDim, kThreads * kVec)][kVec]) {
#pragma unroll
  for (int s = 0; s < ceil_div(kDim, kThreads * kVec); ++s) {
    const int i = row_column<kVec, kThreads>(s, thread);
    if (i < kDim) load_f32<kVec>(row + i, v[s]);
  }
}
template <int kDim, int kVec, int kThreads>
__device__ __forceinline__ float rmsnorm_partial_sum_sq(const float* row, unsigned thread,
                                                        float (&v)[ceil_div(kDim, kThreads * kVec)][kVec]) {
  rmsnorm_load_row<kDim, kVec, kThreads>(row, thread, v);
  return rmsnorm_held_sum_sq<kDim, kVec, kThreads>(v, thread);
}

// Thread `threadIdx.x`'s values of the norm's weight, loaded before the wait for the kernel before
// (no kernel writes them, common.cuh): their load overlaps that kernel's end instead of following
// the reduction.
template <int kDim, int kVec, int kThreads>
__device__ __forceinline__ void load_norm_weight(const bf16* weight, float (&w)[ceil_div(kDim, kThreads * kVec)][kVec]) {
#pragma unroll
  for (int s = 0; s < ceil_div(kDim, kThreads * kVec); ++s) {
    const int i = row_column<kVec, kThreads>(s, threadIdx.x);
    if (i < kDim) load_bf16<kVec>(weight + i, w[s]);
  }
}

// rmsnorm_row over values the thread already holds (rmsnorm_partial_sum_sq's layout): a kernel that
// computes the row itself (rmsnorm's with pending sums) normalizes it with the same operations.
template <int kDim, int kVec, int kThreads>
__device__ __forceinline__ void rmsnorm_held_row(const float (&v)[ceil_div(kDim, kThreads * kVec)][kVec],
                                                 const float (&w)[ceil_div(kDim, kThreads * kVec)][kVec], float eps,
                                                 float (&y)[ceil_div(kDim, kThreads * kVec)][kVec]) {
  constexpr int kSteps = ceil_div(kDim, kThreads * kVec);
  __shared__ float scratch[kThreads / 32];
  const float sum_sq = rmsnorm_held_sum_sq<kDim, kVec, kThreads>(v, threadIdx.x);
  const float total = block_sum<kThreads>(sum_sq, scratch);
  const float scale = rms_scale(total, kDim, eps);
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    if (row_column<kVec, kThreads>(s, threadIdx.x) < kDim) rms_apply<kVec>(v[s], scale, w[s], y[s]);
  }
}

// Thread `threadIdx.x`'s values of the normalized row `in` (every thread of the block calls it):
// y = x · scale · weight in fp32, before the rounding of the output.
template <int kDim, int kVec, int kThreads>
__device__ __forceinline__ void rmsnorm_row(const float* in, const float (&w)[ceil_div(kDim, kThreads * kVec)][kVec],
                                            float eps, float (&y)[ceil_div(kDim, kThreads * kVec)][kVec]) {
  float v[ceil_div(kDim, kThreads * kVec)][kVec];
  rmsnorm_load_row<kDim, kVec, kThreads>(in, threadIdx.x, v);
  rmsnorm_held_row<kDim, kVec, kThreads>(v, w, eps, y);
}

// The normalized values y the thread holds into the bf16 row `row` (rmsnorm_load_row's layout).
template <int kDim, int kVec, int kThreads>
__device__ __forceinline__ void rmsnorm_store_row(bf16* row, const float (&y)[ceil_div(kDim, kThreads * kVec)][kVec]) {
#pragma unroll
  for (int s = 0; s < ceil_div(kDim, kThreads * kVec); ++s) {
    const int i = row_column<kVec, kThreads>(s, threadIdx.x);
    if (i < kDim) store_bf16<kVec>(row + i, y[s]);
  }
}

// One block per output row; the row stays in registers between the reduction and the scaling.
template <int kDim, int kVec, int kThreads, bool kIndirect>
__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(const float* __restrict__ x, const int* __restrict__ rows,
                                                           const bf16* __restrict__ weight, bf16* __restrict__ out,
                                                           float eps) {
  constexpr int kSteps = ceil_div(kDim, kThreads * kVec);
  float w[kSteps][kVec];
  load_norm_weight<kDim, kVec, kThreads>(weight, w);
  pdl_release_and_wait();
  const long long r = blockIdx.x;
  float y[kSteps][kVec];
  rmsnorm_row<kDim, kVec, kThreads>(x + (kIndirect ? static_cast<long long>(rows[r]) : r) * kDim, w, eps, y);
  rmsnorm_store_row<kDim, kVec, kThreads>(out + r * kDim, y);
}

// At most 256 threads a row, each with kDim / 1,024 16-byte loads in flight (4,096 features: 4): a
// prefill's thousands of rows are bound by the bytes in flight. 1,024 threads of one load each
// took 26 µs for 2,048 rows of 4,096 on an H200 (1.85 TB/s); Qwen3-8B's 2,048-token prefill 45.29
// -> 44.60 ms bf16, 31.95 -> 31.42 FP8 (bench/RESULTS.md, fifteenth session; 512 threads: 44.97 / 31.52).
constexpr int kRmsnormMaxThreads = 256;
template <int kDim>
struct RmsnormShape {
  static constexpr int kVec = min_int(vec_width(kDim, 2), 4);  // fp32 loads of at most 16 bytes
  static constexpr int kThreads = min_int(kRmsnormMaxThreads, round_up(ceil_div(kDim, kVec), 32));
};

// Per-head norm geometry (attention_prep.cuh, rmsnorm_inplace.cuh): kLanes lanes per head vector, kVec values per access. Head starts are
// t·kRow + h·kHeadDim, so the vector width must divide both.
template <int kHeadDim, int kRow>
struct HeadNormShape {
  static constexpr int kVec = vec_width(gcd_int(kRow, kHeadDim), 2);
  static constexpr int kLanes = min_int(32, pow2_ceil(ceil_div(kHeadDim, kVec)));
};

// Lane `lane` of the kLanes-lane group that owns one head vector: loads its values into x (when
// `valid`) and returns the group's Σx². Every lane of the warp must call it (it shuffles); lanes of
// an invalid group contribute zeros to their own group only.
template <int kHeadDim, int kVec, int kLanes>
__device__ __forceinline__ float head_sum_sq(const bf16* head, int lane, bool valid,
                                             float (&x)[ceil_div(kHeadDim, kLanes * kVec)][kVec]) {
  constexpr int kSteps = ceil_div(kHeadDim, kLanes * kVec);
  float sum_sq = 0.0f;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int i = (s * kLanes + lane) * kVec;
    if (valid && i < kHeadDim) {
      load_bf16<kVec>(head + i, x[s]);
#pragma unroll
      for (int j = 0; j < kVec; ++j) sum_sq += x[s][j] * x[s][j];
    }
  }
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
  return sum_sq;
}

}  // namespace kiln::detail
