// The collectives of a tensor-parallel rank's reference forward (ops.def: all_reduce, all_gather):
// the generated forward_ref.cpp calls them with its op shape, the CPU backend's threads (simulated
// ranks) meet in ctx.collective. runtime/cuda/collective_ops.hpp is the same on NCCL.
#pragma once

#include <cstdint>

#include "codegen/op_shapes.hpp"
#include "runtime/model/model_def.hpp"

namespace kiln::ref {

// x = Σ over the ranks of x, rows × S.dim values in place (fp32: the residual stream's type).
template <shape::all_reduce S>
void all_reduce(const RefContext& ctx, float* x, int64_t rows) {
  rank_group(ctx, S.ranks).all_reduce(x, x, rows * S.dim, false, nullptr);
}

// logits [rows, S.ranks × S.cols] from each rank's [rows, S.cols] shard at its start.
template <shape::all_gather S>
void all_gather(const RefContext& ctx, float* logits, int64_t rows) {
  rank_group(ctx, S.ranks).all_gather_columns(logits, logits, rows, S.cols, nullptr);
}

}  // namespace kiln::ref
