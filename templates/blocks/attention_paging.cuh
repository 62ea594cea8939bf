// The paged KV cache as the attention kernels address it (the layout itself: kv_layout.hpp).
#pragma once

#include "templates/common.cuh"
#include "templates/kv_layout.hpp"

namespace kiln::detail {

template <int kKvHeads, int kHeadDim, int kPageSize>
struct KvPageLayout {
  // Start of key (kv = 0) or value (kv = 1) vector `offset` of `head` in `page`.
  static __device__ __forceinline__ const bf16* vec(const bf16* cache, int page, int kv, int head, int offset) {
    return cache + KvLayout{kKvHeads, kHeadDim, kPageSize}.vec(page, kv, head, offset);
  }
};

}  // namespace kiln::detail
