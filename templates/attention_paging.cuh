// Address arithmetic of the paged KV cache shared by the attention kernels.
// Cache of one layer: [num_pages][2 (k, v)][kKvHeads][kPageSize][kHeadDim] bf16 (ref::KvPages).
#pragma once

#include "templates/common.cuh"

namespace kiln::detail {

template <int kKvHeads, int kHeadDim, int kPageSize>
struct KvPageLayout {
  // Start of key (kv = 0) or value (kv = 1) vector `offset` of `head` in `page`.
  static __device__ __forceinline__ const bf16* vec(const bf16* cache, int page, int kv, int head, int offset) {
    return cache + ((((static_cast<long long>(page) * 2 + kv) * kKvHeads + head) * kPageSize + offset) * kHeadDim);
  }
};

}  // namespace kiln::detail
