// The collectives of a tensor-parallel rank's CUDA forward (ops.def: all_reduce, all_gather),
// enqueued on the forward's stream through ctx.collective (NCCL), so decode graphs capture them
// with the kernels. runtime/ref/collective_ops.hpp is the same on the CPU reference's threads.
#pragma once

#include <cstdint>

#include <algorithm>

#include "codegen/op_shapes.hpp"
#include "runtime/cuda/context.hpp"
#include "templates/l2_warm.cuh"

namespace kiln::cuda {

// x = Σ over the ranks of x, rows × S.dim values in place (fp32: the residual stream's type).
// warm (decode): the weight [S.warm_rows, S.warm_cols] of the projection after it, whose first
// ctx.l2_warm_bytes start coming into L2 before the sum: a decode step's all-reduce waits on
// NVLink latency with the memory idle, and the projection then reads that part from L2.
template <shape::all_reduce S>
void all_reduce(const CudaContext& ctx, float* x, int rows, const bf16* warm = nullptr) {
  if (warm != nullptr && S.warm_rows > 0 && ctx.l2_warm_bytes > 0) {
    l2_warm(warm, std::min(2LL * S.warm_rows * S.warm_cols, ctx.l2_warm_bytes), ctx.stream);
  }
  rank_group(ctx, S.ranks).all_reduce(x, x, static_cast<int64_t>(rows) * S.dim, false, ctx.stream);
}

// logits [rows, S.ranks × S.cols] from each rank's [rows, S.cols] shard at its start.
template <shape::all_gather S>
void all_gather(const CudaContext& ctx, float* logits, int rows) {
  rank_group(ctx, S.ranks).all_gather_columns(logits, logits, rows, S.cols, ctx.stream);
}

}  // namespace kiln::cuda
