// Prefill attention: every new token of a flat batch attends, causally, to its sequence's keys in
// the paged cache (kv_write has already stored this step's keys).
//   attention_prefill_wgmma.cuh   Hopper's warpgroup tensor cores (head dims 64 and 128, sm_90a)
//   attention_prefill_mma.cuh     tensor cores, FlashAttention-2 style (head dims multiple of 16)
//   attention_prefill_simple.cuh  CUDA cores, for the other head dims
#pragma once

#include "templates/attention_prefill_mma.cuh"
#include "templates/attention_prefill_simple.cuh"
#include "templates/attention_prefill_wgmma.cuh"
#include "templates/common.cuh"
#include "templates/fp8_rows.hpp"
#include "templates/quantize_rows.cuh"

namespace kiln {

namespace detail {

// Prefill attention over a key/value source (blocks/prefill_kv.cuh): on Hopper the wgmma kernel,
// else the mma.sync one, for the head dims each takes and when q rows and keys can be copied 16
// bytes at a time (kWholeChunks); otherwise the CUDA-core kernel. kHeadDim: q·k; kVDim: v and out.
template <int kHeads, int kKvHeads, int kHeadDim, int kVDim, int kRow, bool kWholeChunks, class Kv>
void launch_prefill(const bf16* q_rows, const Kv& kv, bf16* out, const int* query_start, const int* positions,
                    int num_seqs, int max_query_len, float scale, cudaStream_t stream) {
  if constexpr (WgmmaPrefillShape<kHeads, kKvHeads, kHeadDim, kVDim>::kSupported && kWholeChunks) {
    if (wgmma_device()) {
      launch_prefill_wgmma<kHeads, kKvHeads, kHeadDim, kVDim, kRow>(q_rows, kv, out, query_start, positions, num_seqs,
                                                                    max_query_len, scale, stream);
      return;
    }
  }
  if constexpr (PrefillShape<kHeads, kKvHeads, kHeadDim, kVDim>::kSupported && kWholeChunks) {
    launch_prefill_mma<kHeads, kKvHeads, kHeadDim, kVDim, kRow>(q_rows, kv, out, query_start, positions, num_seqs,
                                                                max_query_len, scale, stream);
  } else {
    launch_prefill_simple<kHeads, kKvHeads, kHeadDim, kVDim, kRow>(q_rows, kv, out, query_start, positions, num_seqs,
                                                                   max_query_len, scale, stream);
  }
}

}  // namespace detail

// q of token t, head h at q_rows + t·row + h·head_dim; out [T, heads·head_dim]. Tokens of
// sequence s are [query_start[s], query_start[s+1]); token t attends to positions
// 0..positions[t] of its sequence through block_tables[s·max_pages_per_seq + pos / page_size].
// GQA: head h reads KV head h / (heads / kv_heads). max_query_len bounds every sequence's
// new-token count (it sizes the grid).
//
// Where `out_fp8` is given (the prefill, codegen/fuse.cpp), the rows of the `tokens` tokens
// (query_start[num_seqs]) go out as the FP8 inputs of the projection after the attention
// (templates/fp8_rows.hpp) in place of `out`. The wgmma kernel writes them itself where a head is
// one block of 128 columns (Qwen3's and Llama-3.1-8B's head dim) and the scales are per 128
// columns (the generated prefill asks for those: cuda::fp8_head_inputs_for); otherwise (a row's
// scale spans every head, which no block of the kernel sees) `out` is written and a pass quantizes
// it, as cuda::linear would have.
template <shape::attention S>
void attention_prefill(const bf16* q_rows, const bf16* cache, bf16* out, const int* query_start,
                       const int* positions, const int* block_tables, int max_pages_per_seq, int num_seqs,
                       int max_query_len, Fp8Rows out_fp8, int tokens, cudaStream_t stream) {
  constexpr int kHeads = S.heads, kKvHeads = S.kv_heads, kHeadDim = S.head_dim, kPageSize = S.page_size;
  constexpr int kRow = S.row;
  constexpr float scale = S.scale;
  static_assert(kHeads > 0 && kKvHeads > 0 && kHeads % kKvHeads == 0,
                "attention_prefill: query heads must be a multiple of KV heads");
  static_assert(kHeadDim > 0 && kPageSize > 0, "attention_prefill: sizes must be positive");
  static_assert(kHeads * kHeadDim <= kRow, "attention_prefill: q heads must fit in a row");
  if (num_seqs <= 0 || max_query_len <= 0) return;
  const detail::PagedKv<kKvHeads, kHeadDim, kPageSize> kv{cache, block_tables, max_pages_per_seq};
  // Tensor cores need 16-byte aligned q rows (a cache row is a whole number of 16-byte chunks).
  constexpr bool kWholeChunks = kRow % 8 == 0;
  // codegen pairs the attention only with an FP8-shaped o_proj (whole blocks of 512 columns), and
  // cuda::linear refuses FP8 inputs at any other shape.
  if constexpr ((kHeads * kHeadDim) % kFp8InputBlock == 0) {
    if (out_fp8) {
      if (tokens <= 0) return;
      constexpr int kOut = kHeads * kHeadDim;
      if constexpr (kHeadDim == kFp8InputBlock && kWholeChunks &&
                    detail::WgmmaPrefillShape<kHeads, kKvHeads, kHeadDim, kHeadDim>::kSupported) {
        if (detail::wgmma_device() && !out_fp8.row_scale) {
          detail::launch_fp8_padding_rows(tokens, kOut, out_fp8, stream);
          detail::launch_prefill_wgmma<kHeads, kKvHeads, kHeadDim, kHeadDim, kRow>(
              q_rows, kv, out, query_start, positions, num_seqs, max_query_len, scale, stream, out_fp8,
              fp8_gemm_rows(tokens));
          return;
        }
      }
      detail::launch_prefill<kHeads, kKvHeads, kHeadDim, kHeadDim, kRow, kWholeChunks>(
          q_rows, kv, out, query_start, positions, num_seqs, max_query_len, scale, stream);
      detail::launch_quantize_rows_fp8(out, tokens, kOut, out_fp8, stream);
      return;
    }
  }
  detail::launch_prefill<kHeads, kKvHeads, kHeadDim, kHeadDim, kRow, kWholeChunks>(
      q_rows, kv, out, query_start, positions, num_seqs, max_query_len, scale, stream);
}

// The same without FP8 inputs.
template <shape::attention S>
void attention_prefill(const bf16* q_rows, const bf16* cache, bf16* out, const int* query_start,
                       const int* positions, const int* block_tables, int max_pages_per_seq, int num_seqs,
                       int max_query_len, cudaStream_t stream) {
  attention_prefill<S>(q_rows, cache, out, query_start, positions, block_tables, max_pages_per_seq, num_seqs,
                       max_query_len, Fp8Rows{}, 0, stream);
}

}  // namespace kiln
