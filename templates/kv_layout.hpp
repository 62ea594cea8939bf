// The layout of the paged KV cache, shared by the kernels and the CPU reference (one formula, one
// place). A token's slot is page · page_size + its offset in the page; a layer's cache is
//   dense attention  [num_pages][2 (k, v)][kv_heads][page_size][head_dim]
//                    (a page keeps each head's keys contiguous: the attention kernels stream them)
//   MLA              [num_pages][page_size][width], one latent row (c_kv | k_rope) per slot
// Plain C++ (no system includes), so that NVRTC, nvcc and the host compiler all read it.
#pragma once

#include "templates/host_device.hpp"

namespace kiln {

struct KvLayout {
  int kv_heads, head_dim, page_size;

  // Element offset of the key (kv = 0) or value (kv = 1) vector of `head` at `offset` in `page`.
  KILN_HOST_DEVICE constexpr long long vec(long long page, int kv, int head, int offset) const {
    return (((page * 2 + kv) * kv_heads + head) * page_size + offset) * static_cast<long long>(head_dim);
  }
  // The same for a slot (page · page_size + offset).
  KILN_HOST_DEVICE constexpr long long vec_at_slot(long long slot, int kv, int head) const {
    return vec(slot / page_size, kv, head, static_cast<int>(slot % page_size));
  }
};

struct LatentLayout {
  int width;  // kv_lora_rank + qk_rope_head_dim

  KILN_HOST_DEVICE constexpr long long row(long long slot) const { return slot * width; }
};

}  // namespace kiln
