// The arithmetic of an input row's FP8 codes (templates/fp8_rows.hpp), one definition for every
// kernel that writes them (quantize_rows.cuh, rmsnorm.cuh, silu_mul.cuh, the wgmma prefill
// attention), so that they write the same bits.
#pragma once

#include <cuda_fp8.h>

#include "templates/common.cuh"
#include "templates/fp8_rows.hpp"

namespace kiln::detail {

// The scale of a block of 128 values whose largest magnitude is amax.
__device__ __forceinline__ float fp8_input_scale(float amax) { return amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f; }

// The largest magnitude over a block held by kLanes aligned lanes of a warp (a power of two up to
// 32), each with its values' own largest. Only those lanes' bits of the mask need be active.
template <int kLanes>
__device__ __forceinline__ float fp8_block_amax(float amax) {
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "fp8_block_amax: a power of two up to 32");
  constexpr unsigned kGroupMask = kLanes == 32 ? 0xFFFFFFFFu : (1u << kLanes) - 1u;
  const unsigned mask = kGroupMask << (threadIdx.x % 32 / kLanes * kLanes);
#pragma unroll
  for (int o = kLanes / 2; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(mask, amax, o));
  return amax;
}

// The largest magnitude of kVec values.
template <int kVec>
__device__ __forceinline__ float fp8_amax(const float (&v)[kVec]) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kVec; ++i) amax = fmaxf(amax, fabsf(v[i]));
  return amax;
}

// The codes of two values (the first in the low byte): each value times the scale's reciprocal
// (`inverse` = __frcp_rn(scale), rounded once), both in one conversion. A division per value made
// silu·mul's FP8 kernel bound by its arithmetic: Qwen3-8B's 2,048 × 12,288 took 52.3 µs so, 41.0
// this way (H200, bench/RESULTS.md 2026-11-28 sixteenth session); 0.05% of the codes differ from
// x / scale's, by one step where the product and the quotient round to either side of a tie.
__device__ __forceinline__ unsigned fp8_code_pair(float a, float b, float inverse) {
  const float2 pair = make_float2(__fmul_rn(a, inverse), __fmul_rn(b, inverse));
  return static_cast<unsigned>(__nv_cvt_float2_to_fp8x2(pair, __NV_SATFINITE, __NV_E4M3));
}

// kVec values -> their codes at `out`, kVec bytes in one store (`out` kVec-byte aligned).
template <int kVec>
__device__ __forceinline__ void store_fp8_codes(const float (&v)[kVec], float scale, unsigned char* out) {
  static_assert(kVec == 4 || kVec == 8 || kVec == 16, "store_fp8_codes: 4, 8 or 16 bytes");
  const float inverse = __frcp_rn(scale);
  unsigned packed[kVec / 4] = {};
#pragma unroll
  for (int i = 0; i < kVec; i += 2) packed[i / 4] |= fp8_code_pair(v[i], v[i + 1], inverse) << (8 * (i % 4));
  if constexpr (kVec == 4) {
    *reinterpret_cast<unsigned*>(out) = packed[0];
  } else if constexpr (kVec == 8) {
    *reinterpret_cast<uint2*>(out) = make_uint2(packed[0], packed[1]);
  } else {
    *reinterpret_cast<uint4*>(out) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

// Values as the unfused op stores them (rounded to bf16), which its FP8 codes are made from.
template <int kVec>
__device__ __forceinline__ void round_to_bf16(float (&v)[kVec]) {
#pragma unroll
  for (int i = 0; i < kVec; ++i) v[i] = __bfloat162float(__float2bfloat16_rn(v[i]));
}

// The values of one 128-column block of row `row` held kVec a lane by the block's 128 / kVec
// aligned lanes (`col` the first column of this lane's values): their codes and, from the group's
// first lane, the block's scale. Every lane of the group must call it.
template <int kVec>
__device__ __forceinline__ void store_fp8_block_part(const float (&v)[kVec], Fp8Rows out, int k, int padded,
                                                     long long row, int col) {
  constexpr int kLanes = kFp8InputBlock / kVec;
  const float scale = fp8_input_scale(fp8_block_amax<kLanes>(fp8_amax<kVec>(v)));
  store_fp8_codes<kVec>(v, scale, out.codes + row * k + col);
  if (col % kFp8InputBlock == 0) out.scales[static_cast<long long>(col / kFp8InputBlock) * padded + row] = scale;
}

// Row scales (Fp8Rows::row_scale): a block of kThreads threads holds the row, each thread the largest
// magnitude of its own values in `amax`; every thread gets the row's scale. `scratch` holds
// kThreads / 32 floats; the call ends with the block synchronized so scratch can be reused.
template <int kThreads>
__device__ __forceinline__ float fp8_row_scale(float amax, float* scratch) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "fp8_row_scale: whole warps, at most 1024 threads");
  amax = warp_max(amax);
  if constexpr (kThreads > 32) {
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = amax;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) amax = fmaxf(amax, scratch[w]);
    __syncthreads();
  }
  return fp8_input_scale(amax);
}

// The row's scale into each of its k / 128 slots, by the block's kThreads threads.
template <int kThreads>
__device__ __forceinline__ void store_fp8_row_scale(float scale, Fp8Rows out, int k, int padded, long long row) {
  for (int j = static_cast<int>(threadIdx.x); j < k / kFp8InputBlock; j += kThreads) {
    out.scales[static_cast<long long>(j) * padded + row] = scale;
  }
}

}  // namespace kiln::detail
