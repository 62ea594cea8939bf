// The collectives of a tensor-parallel rank's CUDA forward (ops.def: all_reduce, all_gather),
// enqueued on the forward's stream through ctx.collective (NCCL), so decode graphs capture them
// with the kernels. runtime/ref/collective_ops.hpp is the same on the CPU reference's threads.
#pragma once

#include <cstdint>

#include "codegen/op_shapes.hpp"
#include "runtime/core/error.hpp"
#include "runtime/cuda/context.hpp"

namespace kiln::cuda {

// The forward was generated for S.ranks ranks: the backend must run it in a group of that size.
inline Collective& rank_group(const CudaContext& ctx, int32_t ranks) {
  if (ctx.collective == nullptr || ctx.collective->size() != ranks) {
    fail("internal: a forward built for ", ranks, " tensor-parallel ranks runs in a group of ",
         ctx.collective ? ctx.collective->size() : 1);
  }
  return *ctx.collective;
}

// x = Σ over the ranks of x, rows × S.dim values in place (fp32: the residual stream's type).
template <shape::all_reduce S>
void all_reduce(const CudaContext& ctx, float* x, int rows) {
  rank_group(ctx, S.ranks).all_reduce(x, x, static_cast<int64_t>(rows) * S.dim, false, ctx.stream);
}

// logits [rows, S.ranks × S.cols] from each rank's [rows, S.cols] shard at its start.
template <shape::all_gather S>
void all_gather(const CudaContext& ctx, float* logits, int rows) {
  rank_group(ctx, S.ranks).all_gather_columns(logits, logits, rows, S.cols, ctx.stream);
}

}  // namespace kiln::cuda
