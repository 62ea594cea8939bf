// Collective — the ranks of one tensor-parallel group as the generated forward sees them: a sum
// over the ranks' partial results (after a row-parallel projection, after the vocab-parallel
// embedding) and a gather of the ranks' logits columns (after the vocab-parallel LM head).
//
// Two implementations with the same call sites: threads of one process on the CPU reference
// backend (simulated ranks: CI checks tensor parallelism without GPUs), and NCCL on CUDA, one GPU
// per rank. Every rank makes the same calls in the same order; a call returns (CPU) or is enqueued
// (CUDA) on every rank.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/core/error.hpp"

namespace kiln {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;

  // out = Σ_ranks partial (add: out += Σ_ranks partial), `count` floats; every rank passes its own
  // buffers and ends with the same `out`. `partial` may be overwritten (NCCL reduces in place).
  // `stream`: the cudaStream_t the call is ordered on (NCCL); the CPU ignores it.
  virtual void all_reduce(float* partial, float* out, int64_t count, bool add, void* stream) = 0;

  // The ranks' [rows, cols] shards side by side: out [rows, size() × cols], rank r's shard at
  // columns [r·cols, (r+1)·cols). `shard` may be the start of `out` (gathered in place).
  virtual void all_gather_columns(const float* shard, float* out, int64_t rows, int64_t cols, void* stream) = 0;

  // A rank failed: every rank's pending and later calls fail with an error naming `why` instead of
  // waiting for the failed rank forever. Safe to call from any thread, more than once.
  virtual void abort(const std::string& why) = 0;
};

// The collective of a forward context (RefContext, CudaContext) whose generated forward was built
// for `ranks` ranks: the backend must run it in a group of that size.
template <typename Context>
Collective& rank_group(const Context& ctx, int32_t ranks) {
  if (ctx.collective == nullptr || ctx.collective->size() != ranks) {
    fail("internal: a forward built for ", ranks, " tensor-parallel ranks runs in a group of ",
         ctx.collective ? ctx.collective->size() : 1);
  }
  return *ctx.collective;
}

}  // namespace kiln
