// What the whole-step decode kernel (decode_step.cuh) takes: the weights of every layer and one
// step's arrays and buffers. Plain pointers, so that a generated model.hpp can declare its wrapper.
#pragma once

#include "templates/common.cuh"

namespace kiln {

// One layer's weights (q_norm, k_norm: null without Qwen3's per-head norms).
struct DecodeStepLayer {
  const bf16* input_norm;
  const bf16* qkv_proj;
  const bf16* q_norm;
  const bf16* k_norm;
  const bf16* o_proj;
  const bf16* post_norm;
  const bf16* gate_up_proj;
  const bf16* down_proj;
};

template <int kLayers>
struct DecodeStepWeights {
  const bf16* embed_tokens;
  DecodeStepLayer layers[kLayers];
  const bf16* norm;
  const bf16* lm_head;
};

// The step (a decode step: one token per sequence, sequence s is token s) and the memory it uses.
struct DecodeStepArgs {
  int tokens;
  int num_logits;
  int max_pages_per_seq;
  const int* token_ids;
  const int* positions;
  const int* slot_mapping;
  const int* context_len;
  const int* block_tables;
  const int* logit_rows;
  const float* rope;
  bf16* kv_cache;               // layer l's pages at kv_cache + l · kv_layer_elems
  long long kv_layer_elems;
  float* x;                     // [tokens, hidden] fp32 residual stream
  bf16* qkv;                    // [tokens, qkv width]
  bf16* attn;                   // [tokens, heads · head_dim]
  bf16* act;                    // [tokens, intermediate]
  float* scratch;               // split-KV partials
  float* logits;                // [num_logits, vocab]
  unsigned* sync;               // step_sync words (blocks/step_sync.cuh), zeroed before the first launch
  unsigned long long* timeline; // null, or [stage][block] (start, end) ns: the per-stage profile
};

}  // namespace kiln
