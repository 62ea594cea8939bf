// A projection's column-split sums left for the op after it to add (the decode's residual
// projections and the RMSNorm after each: templates/linear.cuh, templates/rmsnorm.cuh).
//
// Why: a GEMV whose rows are too few to give every SM a block splits the columns too, writes each
// split's sums to scratch and adds them in a kernel of its own (gemv_sum_splits_kernel): Llama-3.2-1B's
// and Qwen3-0.6B's o_proj and down_proj at 9-64 tokens, two launches a layer. Where an RMSNorm of the
// same rows comes next, it adds them instead, in the same order (split 0 first, from 0.0f, then into
// the residual), so the residual and the norm's rows have the bits they had: one launch fewer.
// codegen pairs them (pair_pending_sums) and the generated decode holds one of these between them.
#pragma once

namespace kiln {

struct PendingSums {
  float* out = nullptr;             // the fp32 rows they belong to (the residual stream) [tokens, n]
  const float* partials = nullptr;  // [splits][tokens][n]
  int splits = 0;
  int tokens = 0;
  int n = 0;
  explicit operator bool() const { return partials != nullptr; }
};

}  // namespace kiln
