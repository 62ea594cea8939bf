// CPU reference ops: fp32, straightforward, one function per graph op, named as in
// codegen/ops.def. Each takes the op's shape struct (codegen/op_shapes.hpp) and then the arguments
// of its record, in order; the generated forward_ref.cpp calls them and the CUDA kernels are tested
// against them. Layouts match the CUDA backend's exactly (same KV pages, same fused rows).
#pragma once

#include <cstdint>

#include "codegen/op_shapes.hpp"
#include "runtime/core/step_batch.hpp"
#include "templates/kv_layout.hpp"
#include "templates/weight_matrix.hpp"

namespace kiln {
struct RefContext;
}

namespace kiln::ref {

// One layer of the dense KV cache (the layout of templates/kv_layout.hpp): fp32 values at `base`
// (the reference backend), or bf16 ones at `bf16` (the fast CPU backend: the GPU's format, half the
// bytes); the other pointer is null.
struct KvPages {
  float* base;
  KvLayout layout;
  uint16_t* bf16 = nullptr;
  float* k(int64_t page, int64_t head, int64_t offset) const { return base + layout.vec(page, 0, head, offset); }
  float* v(int64_t page, int64_t head, int64_t offset) const { return base + layout.vec(page, 1, head, offset); }
};

// The pages of the layer whose values start `offset` values into the context's KV cache, in the
// cache's format (RefContext::kv_bf16).
KvPages kv_layer(const RefContext& ctx, int64_t offset, const KvLayout& layout);

// x[t] = table[token_ids[t] - rank·vocab], or zeros when the token is another tensor-parallel
// rank's (the ranks' rows are summed after). The table: fp32 rows (the reference backend), or the
// fast CPU backend's bf16 rows or blocks (templates/weight_matrix.hpp), decoded to ggml's values.
void embed(const shape::embed& s, const int32_t* token_ids, CpuMatrix table, float* x, int32_t rank, int64_t tokens);

// out[r] = x[r] / sqrt(mean(x[r]²) + eps) · weight
void rmsnorm(const shape::rmsnorm& s, const float* x, const float* weight, float* out, int64_t rows);

// out[r] = rmsnorm(x[logit_rows[r]]) for the listed rows only.
void rmsnorm_rows(const shape::rmsnorm_rows& s, const float* x, const int32_t* logit_rows, const float* weight,
                  float* out, int64_t num_rows);

// In place over the first s.dim values of each s.row-wide row.
void rmsnorm_inplace(const shape::rmsnorm_inplace& s, float* rows, const float* weight, int64_t tokens);

// out[t, :] (= or +=, by s.out) in[t, :] · weight[n, k]ᵀ
void linear(const shape::linear& s, const float* in, const float* weight, float* out, int64_t tokens);
// The same op as the generated forward calls it, on a projection as loaded: fp32 rows (the
// reference backend) run the loop above; the formats the fast CPU backend keeps run its kernels
// (runtime/cpu/linear.hpp).
void linear(const shape::linear& s, const float* in, CpuMatrix weight, float* out, int64_t tokens);

// Per-head RMSNorm in place of the q heads (q_norm) and the k heads (k_norm, right after q) of
// each qkv row.
void head_rmsnorm(const shape::head_rmsnorm& s, float* qkv, const float* q_norm, const float* k_norm, int64_t tokens);

// In-place RoPE over s.heads vectors per row: vector h starts at offset + h·head_stride and its
// first rotary_dim values rotate. Pairs are (i, i + rotary_dim/2) or, interleaved, (2i, 2i+1).
// table: [position][rotary_dim/2][cos, sin].
void rope(const shape::rope& s, float* rows, const int32_t* positions, const float* table, int64_t tokens);

// k and v of each token (at row offsets k_offset / v_offset) into its slot (rounded to bf16 where the
// pages are bf16).
void kv_write(const shape::kv_write& s, const float* qkv, const int32_t* slot_mapping, const KvPages& cache,
              int64_t tokens);

// Causal attention of every token over its sequence's cached keys/values (GQA: query head h reads
// KV head h / (heads / kv_heads)). q of token t is at q + t·row, heads × head_dim. With
// fast_kernels (the fast CPU backend, whose pages are bf16), runtime/cpu/attention.hpp's version.
void attention(const shape::attention& s, const float* q, const KvPages& cache, float* out, const StepBatch& step,
               bool fast_kernels = false);

// act[t] = silu(gate_up[t, :dim]) ⊙ gate_up[t, dim:]
void silu_mul(const shape::silu_mul& s, const float* gate_up, float* act, int64_t rows);

}  // namespace kiln::ref
