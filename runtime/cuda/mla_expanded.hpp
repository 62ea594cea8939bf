// The prefill call of mla_attention_expanded (codegen/ops.def): MLA attention with the keys and
// values expanded from the latent cache (templates/mla_attention_expanded.cuh says when that pays,
// and what runs). Host side, because the expansion is two cuBLASLt GEMMs. nvcc-only header.
#pragma once

#include <algorithm>

#include "codegen/op_shapes.hpp"
#include "runtime/core/error.hpp"
#include "runtime/cuda/context.hpp"
#include "runtime/cuda/gemm.hpp"
#include "templates/mla_attention_expanded.cuh"

namespace kiln::cuda {

// q [T, heads × (nope + rope)] (RoPE applied), the layer's latent cache with this step's rows
// already written, W_UK / W_UV [heads × nope (v), latent] -> attn [T, heads × v]. Sequences go in
// groups whose keys fit the workspace (S.keys, the model's max context: any one sequence fits); a
// token's bits do not depend on the group it lands in.
template <shape::mla_attention_expanded S>
void mla_attention_expanded(const CudaContext& ctx, const __nv_bfloat16* q, const __nv_bfloat16* w_uk,
                            const __nv_bfloat16* w_uv, const __nv_bfloat16* cache, __nv_bfloat16* attn,
                            const CudaStep& step) {
  if (step.num_seqs <= 0 || step.max_query_len <= 0) return;
  if (ctx.mla_expanded == nullptr || step.host_context_len == nullptr) {
    fail("internal: mla_attention_expanded needs the backend's workspace and the step's host context lengths");
  }
  const MlaExpanded<S> w(ctx.mla_expanded);
  for (int first = 0; first < step.num_seqs;) {
    int end = first, max_keys = 0;
    long long keys = 0;
    while (end < step.num_seqs && keys + step.host_context_len[end] <= S.keys) {
      keys += step.host_context_len[end];
      max_keys = std::max(max_keys, step.host_context_len[end]);
      ++end;
    }
    if (end == first) {
      fail("internal: mla_attention_expanded: sequence ", first, " has ", step.host_context_len[first],
           " keys, the workspace ", S.keys);
    }
    const int seqs = end - first;
    mla_expand_gather<S>(cache, step.block_tables + static_cast<long long>(first) * step.max_pages_per_seq,
                         step.max_pages_per_seq, step.context_len + first, seqs, max_keys, w, ctx.stream);
    const int rows = static_cast<int>(keys);
    ctx.gemm->run(w.c_kv, w_uk, w.k_nope, rows, S.heads * S.nope, S.latent, LinearOut::store_bf16, ctx.stream);
    ctx.gemm->run(w.c_kv, w_uv, w.v, rows, S.heads * S.v, S.latent, LinearOut::store_bf16, ctx.stream);
    mla_expanded_attention<S>(q, w, attn, step.query_start + first, step.positions, step.context_len + first, seqs,
                              step.max_query_len, ctx.stream);
    first = end;
  }
}

}  // namespace kiln::cuda
