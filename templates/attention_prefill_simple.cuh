// Prefill attention on CUDA cores, one warp per (token, head), keys one at a time with an online
// softmax. The path for head dims the tensor-core kernel does not take (kHeadDim % 16 != 0).
#pragma once

#include "templates/blocks/attention_paging.cuh"
#include "templates/common.cuh"

namespace kiln::detail {

template <int kHeads, int kKvHeads, int kHeadDim, int kPageSize, int kRow>
__global__ void __launch_bounds__(kWarpRowThreads)
    attention_prefill_simple_kernel(const bf16* __restrict__ q_rows, const bf16* __restrict__ cache,
                                    bf16* __restrict__ out, const int* __restrict__ query_start,
                                    const int* __restrict__ positions, const int* __restrict__ block_tables,
                                    int max_pages_per_seq, float scale_log2) {
  pdl_release_and_wait();
  using Layout = KvPageLayout<kKvHeads, kHeadDim, kPageSize>;
  constexpr int kPerLane = ceil_div(kHeadDim, 32);
  const int seq = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long item = static_cast<long long>(blockIdx.x) * kWarpRowsPerBlock + warp;
  const int begin = query_start[seq];
  const long long i = item / kHeads;
  const int head = static_cast<int>(item % kHeads);
  if (i >= query_start[seq + 1] - begin) return;
  const long long t = begin + i;
  const int kv_head = head / (kHeads / kKvHeads);
  const int* pages = block_tables + static_cast<long long>(seq) * max_pages_per_seq;

  float q[kPerLane], acc[kPerLane];
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int d = c * 32 + lane;
    q[c] = d < kHeadDim ? __bfloat162float(q_rows[t * kRow + head * kHeadDim + d]) * scale_log2 : 0.0f;
    acc[c] = 0.0f;
  }
  float m = neg_inf(), l = 0.0f;
  const int keys = positions[t] + 1;
  for (int j = 0; j < keys; ++j) {
    const int page = pages[j / kPageSize];
    const bf16* k = Layout::vec(cache, page, 0, kv_head, j % kPageSize);
    const bf16* v = Layout::vec(cache, page, 1, kv_head, j % kPageSize);
    float dot = 0.0f;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = c * 32 + lane;
      if (d < kHeadDim) dot += q[c] * __bfloat162float(k[d]);
    }
    dot = warp_sum(dot);
    const float m_new = fmaxf(m, dot);
    const float correction = exp2f(m - m_new);
    const float p = exp2f(dot - m_new);
    l = l * correction + p;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = c * 32 + lane;
      acc[c] = acc[c] * correction + (d < kHeadDim ? p * __bfloat162float(v[d]) : 0.0f);
    }
    m = m_new;
  }
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int d = c * 32 + lane;
    if (d < kHeadDim) {
      out[t * kHeads * kHeadDim + head * kHeadDim + d] = __float2bfloat16_rn(l > 0.0f ? acc[c] / l : 0.0f);
    }
  }
}

}  // namespace kiln::detail
