// RMSNorm of every row of the fp32 residual stream into bf16 (ref::rmsnorm):
// out = x / sqrt(mean(x²) + eps) · weight, fp32 math, rounded to bf16 once.
#pragma once

#include "templates/blocks/row_norm.cuh"
#include "templates/common.cuh"

namespace kiln {

template <shape::rmsnorm S>
void rmsnorm(const float* x, const bf16* weight, bf16* out, int rows, cudaStream_t stream) {
  static_assert(S.dim > 0, "rmsnorm: dim must be positive");
  if (rows <= 0) return;
  using Shape = detail::RmsnormShape<S.dim>;
  auto kernel = detail::rmsnorm_kernel<S.dim, Shape::kVec, Shape::kThreads, false>;
  KILN_LAUNCH(kernel, rows, Shape::kThreads, 0, stream, x, nullptr, weight, out, S.eps);
}

}  // namespace kiln
