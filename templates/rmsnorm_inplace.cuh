// RMSNorm in place over the first dim values of each row-wide bf16 row (ref::rmsnorm_inplace):
// DeepSeek-V2 normalizes the q latent (kDim == kRow) and the c_kv part of the
// kv_a rows (c_kv | k_rope: the rope part is left alone). fp32 math, rounded to bf16 once.
#pragma once

#include "templates/blocks/row_norm.cuh"
#include "templates/common.cuh"

namespace kiln {

namespace detail {

// One warp per row: the row's values stay in registers between the sum of squares and the scaling.
// A row is one "head" of kDim values to the shared norm pieces (row_norm.cuh), so the float operations
// are those of every other RMSNorm.
template <int kDim, int kRow, int kVec>
__global__ void __launch_bounds__(kWarpRowThreads)
    rmsnorm_inplace_kernel(bf16* __restrict__ rows, const bf16* __restrict__ weight, int tokens, float eps) {
  pdl_release_and_wait();
  constexpr int kSteps = ceil_div(kDim, 32 * kVec);
  const long long row = static_cast<long long>(blockIdx.x) * kWarpRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= tokens) return;  // whole warps leave together: the shuffles below see all 32 lanes
  bf16* r = rows + row * kRow;
  float v[kSteps][kVec];
  const float scale = rms_scale(head_sum_sq<kDim, kVec, 32>(r, lane, true, v), kDim, eps);
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int i = (s * 32 + lane) * kVec;
    if (i < kDim) {
      float w[kVec], y[kVec];
      load_bf16<kVec>(weight + i, w);
      rms_apply<kVec>(v[s], scale, w, y);
      store_bf16<kVec>(r + i, y);
    }
  }
}

}  // namespace detail

// rows: [tokens, row] bf16, normalized in place over columns [0, dim); weight: [dim].
template <shape::rmsnorm_inplace S>
void rmsnorm_inplace(bf16* rows, const bf16* weight, int tokens, cudaStream_t stream) {
  constexpr int kDim = S.dim, kRow = S.row;
  static_assert(kDim > 0 && kDim <= kRow, "rmsnorm_inplace: dim must be in 1..row");
  if (tokens <= 0) return;
  // Row starts are multiples of kRow and the normalized span ends at kDim: the width divides both.
  constexpr int kVec = detail::vec_width(detail::gcd_int(kDim, kRow), 2);
  auto kernel = detail::rmsnorm_inplace_kernel<kDim, kRow, kVec>;
  KILN_LAUNCH(kernel, detail::ceil_div(tokens, detail::kWarpRowsPerBlock), detail::kWarpRowThreads, 0, stream, rows,
              weight, tokens, S.eps);
}

}  // namespace kiln
