// RMSNorm of the listed rows of the fp32 residual stream only (ref::rmsnorm_rows): the rows that
// need logits. Output row r is the norm of x[logit_rows[r]], with rmsnorm's float operations.
#pragma once

#include "templates/blocks/row_norm.cuh"
#include "templates/common.cuh"

namespace kiln {

template <shape::rmsnorm_rows S>
void rmsnorm_rows(const float* x, const int* logit_rows, const bf16* weight, bf16* out, int num_rows,
                  cudaStream_t stream) {
  static_assert(S.dim > 0, "rmsnorm_rows: dim must be positive");
  if (num_rows <= 0) return;
  using Shape = detail::RmsnormShape<S.dim>;
  auto kernel = detail::rmsnorm_kernel<S.dim, Shape::kVec, Shape::kThreads, true>;
  KILN_LAUNCH(kernel, num_rows, Shape::kThreads, 0, stream, x, logit_rows, weight, out, S.eps);
}

}  // namespace kiln
