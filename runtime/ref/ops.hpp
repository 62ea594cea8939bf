// CPU reference ops: fp32, straightforward, one function per graph op (codegen/ops.def).
// The generated forward_ref.cpp calls these with the model's sizes; the CUDA kernels are tested
// against them. Layouts match the CUDA backend's exactly (same KV pages, same fused rows).
#pragma once

#include <cstdint>

#include "runtime/core/step_batch.hpp"

namespace kiln::ref {

// x[t] = table[token_ids[t]]
void embed(const int32_t* token_ids, int64_t tokens, const float* table, int64_t vocab, int64_t dim, float* x);

// out[r] = x[r] / sqrt(mean(x[r]²) + eps) · weight; rows may have a stride wider than dim.
void rmsnorm(const float* x, int64_t x_stride, const float* weight, float* out, int64_t out_stride, int64_t rows,
             int64_t dim, float eps);

// The same over contiguous rows of exactly dim values.
inline void rmsnorm(const float* x, const float* weight, float* out, int64_t rows, int64_t dim, float eps) {
  rmsnorm(x, dim, weight, out, dim, rows, dim, eps);
}

// out[r] = rmsnorm(x[rows[r]]) for the listed rows only.
void rmsnorm_rows(const float* x, const int32_t* rows, int64_t num_rows, const float* weight, float* out, int64_t dim,
                  float eps);

// out[t, :] (=|+=) in[t, :] · weight[n, k]ᵀ
void linear(const float* in, int64_t tokens, const float* weight, int64_t n, int64_t k, float* out, bool accumulate);

// In-place per-head RMSNorm over `heads` vectors of head_dim at row offset `offset`, head stride head_dim.
void head_rmsnorm(float* rows, int64_t tokens, int64_t row_stride, int64_t offset, int64_t heads, int64_t head_dim,
                  const float* weight, float eps);

// In-place RoPE over `heads` vectors per row: vector h starts at offset + h·head_stride and its
// first `rotary_dim` values rotate. Pairs are (i, i + rotary_dim/2) or, interleaved, (2i, 2i+1).
// table: [position][rotary_dim/2][cos, sin].
void rope(float* rows, int64_t tokens, int64_t row_stride, int64_t offset, int64_t heads, int64_t head_stride,
          int64_t rotary_dim, bool interleaved, const int32_t* positions, const float* table);

// KV-cache geometry of one layer: [num_pages][2 (k, v)][kv_heads][page_size][head_dim].
struct KvPages {
  float* base;
  int64_t kv_heads, head_dim, page_size;
  float* k(int64_t page, int64_t head, int64_t offset) const {
    return base + (((page * 2 + 0) * kv_heads + head) * page_size + offset) * head_dim;
  }
  float* v(int64_t page, int64_t head, int64_t offset) const {
    return base + (((page * 2 + 1) * kv_heads + head) * page_size + offset) * head_dim;
  }
};

// k and v of each token (at row offsets k_offset / v_offset) into its slot.
void kv_write(const float* rows, int64_t tokens, int64_t row_stride, int64_t k_offset, int64_t v_offset,
              const int32_t* slot_mapping, const KvPages& cache);

// Causal attention of every token over its sequence's cached keys/values (GQA: query head h reads
// KV head h / (heads / kv_heads)). q of token t is at rows + t·row_stride, heads × head_dim.
void attention(const float* rows, int64_t row_stride, int64_t heads, float scale, const StepBatch& step,
               const KvPages& cache, float* out);

// act[t] = silu(gate_up[t, :dim]) ⊙ gate_up[t, dim:]
void silu_mul(const float* gate_up, int64_t tokens, int64_t dim, float* act);

}  // namespace kiln::ref
