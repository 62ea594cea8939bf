// Prefill attention on CUDA cores, one warp per (token, head), keys one at a time with an online
// softmax. The path for head dims the tensor-core kernel does not take (not multiples of 16).
#pragma once

#include "templates/blocks/prefill_kv.cuh"
#include "templates/common.cuh"

namespace kiln::detail {

// q and k rows of kHeadDim, v and out rows of kVDim; Kv: a source of blocks/prefill_kv.cuh.
template <int kHeads, int kKvHeads, int kHeadDim, int kVDim, int kRow, class Kv>
__global__ void __launch_bounds__(kWarpRowThreads)
    attention_prefill_simple_kernel(const bf16* __restrict__ q_rows, Kv kv, bf16* __restrict__ out,
                                    const int* __restrict__ query_start, const int* __restrict__ positions,
                                    float scale_log2) {
  pdl_release_and_wait();
  constexpr int kPerLane = ceil_div(kHeadDim, 32), kVPerLane = ceil_div(kVDim, 32);
  const int seq = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long item = static_cast<long long>(blockIdx.x) * kWarpRowsPerBlock + warp;
  const int begin = query_start[seq];
  const long long i = item / kHeads;
  const int head = static_cast<int>(item % kHeads);
  if (i >= query_start[seq + 1] - begin) return;
  const long long t = begin + i;
  const int kv_head = head / (kHeads / kKvHeads);
  kv.bind(seq);

  float q[kPerLane], acc[kVPerLane];
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int d = c * 32 + lane;
    q[c] = d < kHeadDim ? __bfloat162float(q_rows[t * kRow + head * kHeadDim + d]) * scale_log2 : 0.0f;
  }
#pragma unroll
  for (int c = 0; c < kVPerLane; ++c) acc[c] = 0.0f;
  float m = neg_inf(), l = 0.0f;
  const int keys = positions[t] + 1;
  for (int j = 0; j < keys; ++j) {
    float dot = 0.0f;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = c * 32 + lane;
      if (d < kHeadDim) dot += q[c] * __bfloat162float(*kv.key(kv_head, j, d));
    }
    dot = warp_sum(dot);
    const float m_new = fmaxf(m, dot);
    const float correction = exp2f(m - m_new);
    const float p = exp2f(dot - m_new);
    l = l * correction + p;
#pragma unroll
    for (int c = 0; c < kVPerLane; ++c) {
      const int d = c * 32 + lane;
      acc[c] = acc[c] * correction + (d < kVDim ? p * __bfloat162float(*kv.value(kv_head, j, d)) : 0.0f);
    }
    m = m_new;
  }
#pragma unroll
  for (int c = 0; c < kVPerLane; ++c) {
    const int d = c * 32 + lane;
    if (d < kVDim) out[t * kHeads * kVDim + head * kVDim + d] = __float2bfloat16_rn(l > 0.0f ? acc[c] / l : 0.0f);
  }
}

// The launch: one warp per (token, head) row of a sequence.
template <int kHeads, int kKvHeads, int kHeadDim, int kVDim, int kRow, class Kv>
void launch_prefill_simple(const bf16* q_rows, const Kv& kv, bf16* out, const int* query_start, const int* positions,
                           int num_seqs, int max_query_len, float scale, cudaStream_t stream) {
  const long long rows = static_cast<long long>(max_query_len) * kHeads;
  const dim3 grid(static_cast<unsigned>(ceil_div_ll(rows, kWarpRowsPerBlock)), num_seqs);
  KILN_LAUNCH((attention_prefill_simple_kernel<kHeads, kKvHeads, kHeadDim, kVDim, kRow, Kv>), grid, kWarpRowThreads, 0,
              stream, q_rows, kv, out, query_start, positions, scale * kLog2e);
}

}  // namespace kiln::detail
