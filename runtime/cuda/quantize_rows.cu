#include "runtime/cuda/quantize_rows.hpp"

#include <cuda_fp8.h>

#include <cstdint>

#include "runtime/core/error.hpp"

namespace kiln::cuda {

namespace {

// Half a warp per (row, block of 128 columns), 8 values a lane in one 16-byte load; a warp takes
// kSteps pairs of blocks, their loads issued before any is used. One warp per block with 8-byte
// loads kept too few bytes in flight: 1.55-1.73 TB/s at 2,048 tokens of Qwen3-8B's inputs on an H200
// (bench/RESULTS.md, fourteenth session). The same arithmetic per value, so the same codes.
template <int kSteps>
__global__ void __launch_bounds__(256)
    quantize_rows_fp8_kernel(const __nv_bfloat16* __restrict__ in, int rows, int padded, int k,
                             uint8_t* __restrict__ codes, float* __restrict__ scales) {
  const int blocks = k / kFp8InputBlock;
  const long long tasks = static_cast<long long>(padded) * blocks;
  const long long warp = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32, sub = lane % 16;
  uint4 raw[kSteps];
  long long at[kSteps];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const long long task = (warp * kSteps + s) * 2 + lane / 16;
    const int row = static_cast<int>(task / blocks), block = static_cast<int>(task % blocks);
    at[s] = task < tasks ? static_cast<long long>(row) * k + block * kFp8InputBlock + sub * 8 : -1;
    raw[s] = at[s] >= 0 && row < rows ? *reinterpret_cast<const uint4*>(in + at[s]) : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    float v[8];
    const uint32_t words[4] = {raw[s].x, raw[s].y, raw[s].z, raw[s].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[i]));
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
    for (int o = 8; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));  // within the half
    if (at[s] < 0) continue;
    const float scale = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
    uint32_t packed[2] = {0u, 0u};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const auto code = static_cast<uint32_t>(__nv_cvt_float_to_fp8(__fdiv_rn(v[i], scale), __NV_SATFINITE, __NV_E4M3));
      packed[i / 4] |= code << (8 * (i % 4));
    }
    *reinterpret_cast<uint2*>(codes + at[s]) = make_uint2(packed[0], packed[1]);
    if (sub == 0) {
      const long long task = (warp * kSteps + s) * 2 + lane / 16;
      scales[(task % blocks) * padded + task / blocks] = scale;
    }
  }
}

// Tasks (row, block) from which a warp takes four pairs (the GPU test's 300 rows of 8,192 columns
// do; its 17, and 300 of 2,048, take one).
constexpr long long kManyTasks = 8192;

}  // namespace

void quantize_rows_fp8(const __nv_bfloat16* in, int rows, int k, uint8_t* codes, float* scales, cudaStream_t stream) {
  if (rows <= 0 || k <= 0 || k % kFp8InputBlock != 0) {
    fail("internal: quantize_rows_fp8 of ", rows, " rows of ", k, " (k must be whole blocks of ", kFp8InputBlock, ")");
  }
  if (reinterpret_cast<uintptr_t>(in) % 16 != 0) {  // the arena's buffers are 256-byte aligned (codegen)
    fail("internal: quantize_rows_fp8's input is not 16-byte aligned");
  }
  const int padded = fp8_gemm_rows(rows);
  const long long tasks = static_cast<long long>(padded) * (k / kFp8InputBlock);
  // Four pairs of blocks a warp where there are many (a prefill chunk's thousands of rows); one
  // where there are few, which more warps cover sooner (16 rows of 4,096: 4.9 µs in four, 2.7 in
  // one, 2.6 in the earlier kernel's one block a warp; 2,048 rows: 13.8 µs in four, 16.3 earlier).
  const auto launch = [&](auto kernel, int steps) {
    const long long threads = (tasks + 2 * steps - 1) / (2 * steps) * 32;
    kernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(in, rows, padded, k, codes, scales);
  };
  if (tasks >= kManyTasks) {
    launch(quantize_rows_fp8_kernel<4>, 4);
  } else {
    launch(quantize_rows_fp8_kernel<1>, 1);
  }
}

}  // namespace kiln::cuda
