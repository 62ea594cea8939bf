// CPU reference ops of multi-head latent attention (DeepSeek-V2), on the absorbed formulation: the
// cache holds one latent row per token, queries are folded into the latent space (W_UK), outputs
// lifted back out (W_UV). Layouts match the CUDA kernels exactly.
#pragma once

#include <cstdint>

#include "codegen/op_shapes.hpp"
#include "runtime/core/step_batch.hpp"
#include "templates/kv_layout.hpp"

namespace kiln::ref {

// One layer of the latent cache, in fp32: one row per slot (templates/kv_layout.hpp).
struct LatentPages {
  float* base;
  LatentLayout layout;
  int64_t page_size;
  float* row(int64_t slot) const { return base + layout.row(slot); }
};

// cache[slot_mapping[t]] = kv_a[t] (c_kv | k_rope, already normalized and rotated).
void mla_kv_write(const shape::mla_kv_write& s, const float* kv_a, const int32_t* slot_mapping,
                  const LatentPages& cache, int64_t tokens);

// q_mla[t, h] = (W_UK[h]ᵀ · q[t, h, :nope]) | q[t, h, nope:nope+rope]. w_uk: [heads, nope, latent].
void mla_q_absorb(const shape::mla_q_absorb& s, const float* q, const float* w_uk, float* q_mla, int64_t tokens);

// o_lat[t, h] = Σ_j softmax_j((q_lat·c_j + q_rope·k_rope_j)·scale) c_j over positions 0..positions[t]
// of t's sequence.
void mla_attention(const shape::mla_attention& s, const float* q_mla, const LatentPages& cache, float* o_lat,
                   const StepBatch& step);

// out[t, h] = W_UV[h] · o_lat[t, h]. w_uv: [heads, v, latent].
void mla_v_up(const shape::mla_v_up& s, const float* o_lat, const float* w_uv, float* out, int64_t tokens);

}  // namespace kiln::ref
