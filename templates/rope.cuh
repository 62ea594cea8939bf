// Rotary position embedding, in place on bf16 rows (ref::rope). The runtime precomputes the
// table with the model's rope scaling: table[position][kRotaryDim / 2] = (cos, sin), fp32.
// Pairs are (i, i + kRotaryDim/2) (Llama, Qwen) or (2i, 2i+1) when kInterleaved (DeepSeek).
// Each pair is rotated in fp32 from its bf16 values and rounded once.
#pragma once

#include "templates/common.cuh"

namespace kiln {

namespace detail {

// One thread per (token, head, pair); consecutive threads take consecutive pairs of one head, so
// a warp reads contiguous stretches of the row.
template <int kHeads, int kHeadStride, int kRotaryDim, int kRow, bool kInterleaved>
__global__ void __launch_bounds__(256) rope_kernel(bf16* __restrict__ rows, int offset,
                                                   const int* __restrict__ positions,
                                                   const float* __restrict__ table, long long pairs) {
  constexpr int kHalf = kRotaryDim / 2;
  const long long item = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x;
  if (item >= pairs) return;
  const int i = static_cast<int>(item % kHalf);
  const long long vector = item / kHalf;
  const int head = static_cast<int>(vector % kHeads);
  const long long t = vector / kHeads;
  const float2 cs = reinterpret_cast<const float2*>(table)[static_cast<long long>(positions[t]) * kHalf + i];
  bf16* v = rows + t * kRow + offset + head * kHeadStride;
  bf16* pa = kInterleaved ? v + 2 * i : v + i;
  bf16* pb = kInterleaved ? v + 2 * i + 1 : v + i + kHalf;
  const float a = __bfloat162float(*pa), b = __bfloat162float(*pb);
  *pa = __float2bfloat16_rn(a * cs.x - b * cs.y);
  *pb = __float2bfloat16_rn(b * cs.x + a * cs.y);
}

}  // namespace detail

// `offset` is where head 0 starts inside a row; the generator keeps offset + kHeads·kHeadStride
// within kRow.
template <int kHeads, int kHeadStride, int kRotaryDim, int kRow, bool kInterleaved>
void rope(bf16* rows, int offset, const int* positions, const float* table, int tokens, cudaStream_t stream) {
  static_assert(kHeads > 0 && kRotaryDim > 0 && kRotaryDim % 2 == 0, "rope: kRotaryDim must be positive and even");
  static_assert(kRotaryDim <= kHeadStride || kHeads == 1, "rope: rotated dims must fit in a head");
  static_assert((kHeads - 1) * kHeadStride + kRotaryDim <= kRow, "rope: heads must fit in a row");
  if (tokens <= 0) return;
  const long long pairs = static_cast<long long>(tokens) * kHeads * (kRotaryDim / 2);
  const int blocks = static_cast<int>(detail::ceil_div_ll(pairs, 256));
  auto kernel = detail::rope_kernel<kHeads, kHeadStride, kRotaryDim, kRow, kInterleaved>;
  KILN_LAUNCH(kernel, blocks, 256, 0, stream, rows, offset, positions, table, pairs);
}

}  // namespace kiln
