// Rotary position embedding, in place on bf16 rows (ref::rope). The runtime precomputes the
// table with the model's rope scaling: table[position][kRotaryDim / 2] = (cos, sin), fp32.
// Pairs are (i, i + kRotaryDim/2) (Llama, Qwen) or (2i, 2i+1) when kInterleaved (DeepSeek).
// Each pair is rotated in fp32 from its bf16 values and rounded once.
#pragma once

#include "templates/common.cuh"

namespace kiln {

namespace detail {

// Rotates the pair (*pa, *pb) by the angle whose (cos, sin) is cs: in fp32 from the bf16 values,
// each result rounded once.
__device__ __forceinline__ void rope_rotate(bf16* pa, bf16* pb, float2 cs) {
  const float a = __bfloat162float(*pa), b = __bfloat162float(*pb);
  *pa = __float2bfloat16_rn(a * cs.x - b * cs.y);
  *pb = __float2bfloat16_rn(b * cs.x + a * cs.y);
}

// One thread per (token, head, pair); consecutive threads take consecutive pairs of one head, so
// a warp reads contiguous stretches of the row.
template <int kHeads, int kHeadStride, int kRotaryDim, int kRow, bool kInterleaved>
__global__ void __launch_bounds__(kElementwiseThreads) rope_kernel(bf16* __restrict__ rows, int offset,
                                                   const int* __restrict__ positions,
                                                   const float* __restrict__ table, long long pairs) {
  pdl_release_and_wait();
  constexpr int kHalf = kRotaryDim / 2;
  const long long item = static_cast<long long>(blockIdx.x) * kElementwiseThreads + threadIdx.x;
  if (item >= pairs) return;
  const int i = static_cast<int>(item % kHalf);
  const long long vector = item / kHalf;
  const int head = static_cast<int>(vector % kHeads);
  const long long t = vector / kHeads;
  const float2 cs = reinterpret_cast<const float2*>(table)[static_cast<long long>(positions[t]) * kHalf + i];
  bf16* v = rows + t * kRow + offset + head * kHeadStride;
  bf16* pa = kInterleaved ? v + 2 * i : v + i;
  bf16* pb = kInterleaved ? v + 2 * i + 1 : v + i + kHalf;
  rope_rotate(pa, pb, cs);
}

}  // namespace detail

// Head h of a row starts at offset + h·head_stride; its first rotary_dim values rotate.
// table: [position][rotary_dim / 2] (cos, sin).
template <shape::rope S>
void rope(bf16* rows, const int* positions, const float* table, int tokens, cudaStream_t stream) {
  constexpr int kHeads = S.heads, kHeadStride = S.head_stride, kRotaryDim = S.rotary_dim, kRow = S.row;
  static_assert(kHeads > 0 && kRotaryDim > 0 && kRotaryDim % 2 == 0, "rope: rotary_dim must be positive and even");
  static_assert(kRotaryDim <= kHeadStride || kHeads == 1, "rope: rotated dims must fit in a head");
  static_assert(S.offset + (kHeads - 1) * kHeadStride + kRotaryDim <= kRow, "rope: heads must fit in a row");
  if (tokens <= 0) return;
  const long long pairs = static_cast<long long>(tokens) * kHeads * (kRotaryDim / 2);
  const int blocks = static_cast<int>(detail::ceil_div_ll(pairs, detail::kElementwiseThreads));
  auto kernel = detail::rope_kernel<kHeads, kHeadStride, kRotaryDim, kRow, S.interleaved>;
  KILN_LAUNCH(kernel, blocks, detail::kElementwiseThreads, 0, stream, rows, S.offset, positions, table, pairs);
}

}  // namespace kiln
