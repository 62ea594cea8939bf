// CPU reference ops of multi-head latent attention (DeepSeek-V2), on the absorbed formulation: the
// cache holds one latent row per token, queries are folded into the latent space (W_UK), outputs
// lifted back out (W_UV). Layouts match the CUDA kernels exactly.
#pragma once

#include <cstdint>

#include "runtime/core/step_batch.hpp"

namespace kiln::ref {

// Latent cache of one layer: [num_pages][page_size][width], width = kv_lora_rank + rope dims.
struct LatentPages {
  float* base;
  int64_t width, page_size;
  float* row(int64_t slot) const { return base + slot * width; }
};

// cache[slot_mapping[t]] = kv_a[t] (c_kv | k_rope, already normalized and rotated).
void mla_kv_write(const float* kv_a, int64_t tokens, const int32_t* slot_mapping, const LatentPages& cache);

// q_mla[t, h] = (W_UK[h]ᵀ · q[t, h, :nope]) | q[t, h, nope:nope+rope]. w_uk: [heads, nope, latent].
void mla_q_absorb(const float* q, int64_t tokens, int64_t heads, int64_t nope, int64_t rope, int64_t latent,
                  const float* w_uk, float* q_mla);

// o_lat[t, h] = Σ_j softmax_j((q_lat·c_j + q_rope·k_rope_j)·scale) c_j over positions 0..positions[t]
// of t's sequence.
void mla_attention(const float* q_mla, int64_t heads, int64_t latent, int64_t rope, float scale, const StepBatch& step,
                   const LatentPages& cache, float* o_lat);

// out[t, h] = W_UV[h] · o_lat[t, h]. w_uv: [heads, v, latent].
void mla_v_up(const float* o_lat, int64_t tokens, int64_t heads, int64_t latent, int64_t v, const float* w_uv,
              float* out);

}  // namespace kiln::ref
