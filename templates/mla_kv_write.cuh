// MLA's latent cache write (ref::mla_kv_write): the cache row of each token is c_kv | k_rope,
// already normalized and rotated. Cache of one layer: [num_pages][page_size][latent + rope] bf16,
// slot s = page · page_size + offset is row s (kv_layout.hpp). Negative slots (padding) are skipped.
#pragma once

#include "templates/common.cuh"
#include "templates/kv_layout.hpp"

namespace kiln {

namespace detail {

// One thread per vector of a cache row.
template <int kWidth, int kVec>
__global__ void __launch_bounds__(kElementwiseThreads) mla_kv_write_kernel(const bf16* __restrict__ kv_a,
                                                           const int* __restrict__ slot_mapping,
                                                           bf16* __restrict__ cache, long long vectors) {
  pdl_release_and_wait();
  constexpr int kPerRow = kWidth / kVec;
  const long long item = static_cast<long long>(blockIdx.x) * kElementwiseThreads + threadIdx.x;
  if (item >= vectors) return;
  const long long t = item / kPerRow;
  const int i = static_cast<int>(item % kPerRow) * kVec;
  const int slot = slot_mapping[t];
  if (slot < 0) return;  // a padding token: no cache row
  using Bits = typename BitsOf<kVec>::type;
  *reinterpret_cast<Bits*>(cache + LatentLayout{kWidth}.row(slot) + i) =
      *reinterpret_cast<const Bits*>(kv_a + t * kWidth + i);
}

}  // namespace detail

template <shape::mla_kv_write S>
void mla_kv_write(const bf16* kv_a, const int* slot_mapping, bf16* cache, int tokens, cudaStream_t stream) {
  static_assert(S.latent > 0 && S.rope >= 0 && S.page_size > 0, "mla_kv_write: sizes must be positive");
  if (tokens <= 0) return;
  constexpr int kWidth = S.latent + S.rope;
  constexpr int kVec = detail::vec_width(kWidth, 2);
  const long long vectors = static_cast<long long>(tokens) * (kWidth / kVec);
  auto kernel = detail::mla_kv_write_kernel<kWidth, kVec>;
  KILN_LAUNCH(kernel, static_cast<int>(detail::ceil_div_ll(vectors, detail::kElementwiseThreads)),
              detail::kElementwiseThreads, 0, stream, kv_a, slot_mapping, cache, vectors);
}

}  // namespace kiln
