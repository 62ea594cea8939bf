#include "runtime/cuda/quantize_rows.hpp"

#include <cuda_fp8.h>

#include "runtime/core/error.hpp"

namespace kiln::cuda {

namespace {

// One warp per (row, block of 128 columns): 4 values a lane, the block's max over the warp.
__global__ void __launch_bounds__(256)
    quantize_rows_fp8_kernel(const __nv_bfloat16* __restrict__ in, int rows, int padded, int k,
                             uint8_t* __restrict__ codes, float* __restrict__ scales) {
  const int blocks = k / kFp8InputBlock;
  const long long task = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (task >= static_cast<long long>(padded) * blocks) return;
  const int row = static_cast<int>(task / blocks), block = static_cast<int>(task % blocks);
  const long long at = static_cast<long long>(row) * k + block * kFp8InputBlock + lane * 4;
  const uint2 raw = row < rows ? *reinterpret_cast<const uint2*>(in + at) : make_uint2(0u, 0u);  // padding: zeros
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  float amax = fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(b.x), fabsf(b.y)));
#pragma unroll
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  const float scale = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
  const auto code = [&](float x) {
    return static_cast<unsigned>(__nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, __NV_E4M3));
  };
  *reinterpret_cast<unsigned*>(codes + at) = code(a.x) | code(a.y) << 8 | code(b.x) << 16 | code(b.y) << 24;
  if (lane == 0) scales[static_cast<long long>(block) * padded + row] = scale;
}

}  // namespace

void quantize_rows_fp8(const __nv_bfloat16* in, int rows, int k, uint8_t* codes, float* scales, cudaStream_t stream) {
  if (rows <= 0 || k <= 0 || k % kFp8InputBlock != 0) {
    fail("internal: quantize_rows_fp8 of ", rows, " rows of ", k, " (k must be whole blocks of ", kFp8InputBlock, ")");
  }
  const int padded = fp8_gemm_rows(rows);
  const long long threads = static_cast<long long>(padded) * (k / kFp8InputBlock) * 32;
  quantize_rows_fp8_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(in, rows, padded, k, codes,
                                                                                                scales);
}

}  // namespace kiln::cuda
