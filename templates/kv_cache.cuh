// Writes each token's k and v into its slot of the paged KV cache (ref::kv_write).
// Cache of ONE layer: [num_pages][2 (k, v)][kKvHeads][kPageSize][kHeadDim] bf16 (ref::KvPages);
// slot = page · kPageSize + offset in the page. A negative slot (a padding row) writes nothing.
#pragma once

#include "templates/common.cuh"

namespace kiln {

namespace detail {

// One thread per kVec values of one (token, k or v, head).
template <int kKvHeads, int kHeadDim, int kPageSize, int kRow, int kVec>
__global__ void __launch_bounds__(256) kv_write_kernel(const bf16* __restrict__ rows, int k_offset, int v_offset,
                                                       const int* __restrict__ slot_mapping, bf16* __restrict__ cache,
                                                       long long vectors) {
  constexpr int kPerHead = kHeadDim / kVec;
  const long long item = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x;
  if (item >= vectors) return;
  const int chunk = static_cast<int>(item % kPerHead);
  const long long vector = item / kPerHead;
  const int head = static_cast<int>(vector % kKvHeads);
  const int kv = static_cast<int>((vector / kKvHeads) % 2);
  const long long t = vector / (2 * kKvHeads);
  const int slot = slot_mapping[t];
  if (slot < 0) return;
  const long long page = slot / kPageSize;
  const int in_page = slot % kPageSize;
  const bf16* src = rows + t * kRow + (kv == 0 ? k_offset : v_offset) + head * kHeadDim + chunk * kVec;
  bf16* dst = cache + (((page * 2 + kv) * kKvHeads + head) * kPageSize + in_page) * kHeadDim + chunk * kVec;
  using Bits = typename BitsOf<kVec>::type;
  *reinterpret_cast<Bits*>(dst) = *reinterpret_cast<const Bits*>(src);
}

}  // namespace detail

template <int kKvHeads, int kHeadDim, int kPageSize, int kRow>
void kv_write(const bf16* rows, int k_offset, int v_offset, const int* slot_mapping, bf16* cache, int tokens,
              cudaStream_t stream) {
  static_assert(kKvHeads > 0 && kHeadDim > 0 && kPageSize > 0, "kv_write: sizes must be positive");
  if (tokens <= 0) return;
  // Source vectors start at t·kRow + offset + h·kHeadDim: the width must divide all of them.
  constexpr int kVec = detail::vec_width(detail::gcd_int(detail::gcd_int(kRow, kHeadDim), 8), 2);
  if (k_offset % kVec == 0 && v_offset % kVec == 0) {
    const long long vectors = static_cast<long long>(tokens) * 2 * kKvHeads * (kHeadDim / kVec);
    auto kernel = detail::kv_write_kernel<kKvHeads, kHeadDim, kPageSize, kRow, kVec>;
    KILN_LAUNCH(kernel, static_cast<int>(detail::ceil_div_ll(vectors, 256)), 256, 0, stream, rows, k_offset,
                v_offset, slot_mapping, cache, vectors);
  } else {
    const long long vectors = static_cast<long long>(tokens) * 2 * kKvHeads * kHeadDim;
    auto kernel = detail::kv_write_kernel<kKvHeads, kHeadDim, kPageSize, kRow, 1>;
    KILN_LAUNCH(kernel, static_cast<int>(detail::ceil_div_ll(vectors, 256)), 256, 0, stream, rows, k_offset,
                v_offset, slot_mapping, cache, vectors);
  }
}

}  // namespace kiln
