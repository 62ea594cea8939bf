// The whole-step decode kernel's arguments (templates/decode_step_io.cuh) from a step and the
// backend's context: what every generated forward_decode_step passes, but for its arena buffers.
// nvcc-only header.
#pragma once

#include "runtime/cuda/context.hpp"
#include "templates/decode_step_io.cuh"

namespace kiln {

// x, qkv, attn, act: the model's arena buffers (GpuArena offsets in its model.hpp).
inline DecodeStepArgs decode_step_args(const CudaStep& step, const CudaContext& ctx, float* logits, float* x,
                                       bf16* qkv, bf16* attn, bf16* act) {
  DecodeStepArgs a{};
  a.tokens = step.num_tokens;
  a.num_logits = step.num_logits;
  a.max_pages_per_seq = step.max_pages_per_seq;
  a.token_ids = step.token_ids;
  a.positions = step.positions;
  a.slot_mapping = step.slot_mapping;
  a.context_len = step.context_len;
  a.block_tables = step.block_tables;
  a.logit_rows = step.logit_rows;
  a.rope = ctx.rope;
  a.kv_cache = ctx.kv_layer<bf16>(0);
  a.kv_layer_elems = ctx.kv_layer_bytes / static_cast<int64_t>(sizeof(bf16));
  a.x = x;
  a.qkv = qkv;
  a.attn = attn;
  a.act = act;
  a.scratch = ctx.scratch;
  a.logits = logits;
  a.sync = ctx.step_sync;
  a.timeline = ctx.step_timeline;
  return a;
}

}  // namespace kiln
