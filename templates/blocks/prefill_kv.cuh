// Where a prefill attention kernel finds its keys and values. A source is passed to the kernel by
// value; every thread calls bind(seq) once with the block's sequence, then key(kv_head, key, col)
// and value(kv_head, key, col) give the address of element col of that key's (value's) row: for the
// tensor-core kernels, col is a multiple of 8 and the 8 values from there are contiguous and 16-byte
// aligned. key_value(kv_head, key, col, k, v) gives both at once (one page lookup).
//   PagedKv      the paged KV cache of dense attention (kv_layout.hpp), through the block tables
//   ExpandedKv   MLA's keys and values expanded from the latent cache (mla_attention_expanded.cuh)
#pragma once

#include "templates/blocks/attention_paging.cuh"
#include "templates/common.cuh"

namespace kiln::detail {

template <int kKvHeads, int kHeadDim, int kPageSize>
struct PagedKv {
  const bf16* cache;
  const int* block_tables;  // [num_seqs × max_pages_per_seq]
  int max_pages_per_seq;
  const int* pages = nullptr;  // the bound sequence's

  __device__ __forceinline__ void bind(int seq) { pages = block_tables + static_cast<long long>(seq) * max_pages_per_seq; }
  // The page ids through the read-only path (__ldg), as the kernels read them when the block tables
  // were a __restrict__ parameter (a struct member carries no __restrict__).
  __device__ __forceinline__ const bf16* key(int kv_head, int key, int col) const {
    return KvPageLayout<kKvHeads, kHeadDim, kPageSize>::vec(cache, __ldg(pages + key / kPageSize), 0, kv_head,
                                                            key % kPageSize) +
           col;
  }
  __device__ __forceinline__ const bf16* value(int kv_head, int key, int col) const {
    return KvPageLayout<kKvHeads, kHeadDim, kPageSize>::vec(cache, __ldg(pages + key / kPageSize), 1, kv_head,
                                                            key % kPageSize) +
           col;
  }
  __device__ __forceinline__ void key_value(int kv_head, int key, int col, const bf16*& k, const bf16*& v) const {
    constexpr long long kValueOffset = KvLayout{kKvHeads, kHeadDim, kPageSize}.vec(0, 1, 0, 0);  // V's vector from K's
    k = this->key(kv_head, key, col);
    v = k + kValueOffset;
  }
};

}  // namespace kiln::detail
