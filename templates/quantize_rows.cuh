// A pass that makes the prefill FP8 GEMM's inputs (templates/fp8_rows.hpp) from bf16 rows, where
// the op before the projection did not write them itself: runtime/cuda/quantize_rows.cu for any
// projection, and the prefill attention where its kernel cannot (attention_prefill.cuh). Also the
// padding rows alone, for a kernel that writes the real rows' inputs itself.
#pragma once

#include "templates/blocks/fp8_quantize.cuh"
#include "templates/common.cuh"
#include "templates/fp8_rows.hpp"

namespace kiln::detail {

// Half a warp per (row, block of 128 columns), 8 values a lane in one 16-byte load; a warp takes
// kSteps pairs of blocks, their loads issued before any is used. One warp per block with 8-byte
// loads kept too few bytes in flight: 1.55-1.73 TB/s at 2,048 tokens of Qwen3-8B's inputs on an H200
// (bench/RESULTS.md, fourteenth session).
template <int kSteps>
__global__ void __launch_bounds__(256)
    quantize_rows_fp8_kernel(const bf16* __restrict__ in, int rows, int padded, int k, Fp8Rows out) {
  pdl_release_and_wait();
  const int blocks = k / kFp8InputBlock;
  const long long tasks = static_cast<long long>(padded) * blocks;
  const long long warp = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  uint4 raw[kSteps];
  int row[kSteps], col[kSteps];  // row -1: the half-warp's task is past the last
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const long long task = (warp * kSteps + s) * 2 + lane / 16;
    row[s] = task < tasks ? static_cast<int>(task / blocks) : -1;
    col[s] = static_cast<int>(task % blocks) * kFp8InputBlock + lane % 16 * 8;
    const bool real = row[s] >= 0 && row[s] < rows;
    raw[s] = real ? *reinterpret_cast<const uint4*>(in + static_cast<long long>(row[s]) * k + col[s])
                  : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    if (row[s] < 0) continue;  // the whole half-warp, which is all the block's shuffles involve
    float v[8];
    unpack_bf16<8>(raw[s], v);
    store_fp8_block_part<8>(v, out, k, padded, row[s], col[s]);
  }
}

// The same with one scale per row (Fp8Rows::row_scale): a block of kQuantizeRowThreads per row of
// `padded`, 8 values a thread per 16-byte load. Up to kRowCached loads a thread stay in registers
// between the row's largest value and its codes (rows up to 16,384 columns); the rest of a longer
// row is read again. (A template so that each translation unit may hold it.)
constexpr int kQuantizeRowThreads = 256;
template <int kRowCached>
__global__ void __launch_bounds__(kQuantizeRowThreads)
    quantize_rows_fp8_row_scale_kernel(const bf16* __restrict__ in, int rows, int padded, int k, Fp8Rows out) {
  pdl_release_and_wait();
  const long long r = blockIdx.x;
  const int vectors = k / 8;
  const bool real = r < rows;  // the same for the whole block
  const bf16* row = in + r * k;
  uint4 raw[kRowCached];
#pragma unroll
  for (int c = 0; c < kRowCached; ++c) {
    const int v = c * kQuantizeRowThreads + static_cast<int>(threadIdx.x);
    raw[c] = real && v < vectors ? *reinterpret_cast<const uint4*>(row + v * 8) : make_uint4(0u, 0u, 0u, 0u);
  }
  float amax = 0.0f, values[8];
#pragma unroll
  for (int c = 0; c < kRowCached; ++c) {
    unpack_bf16<8>(raw[c], values);
    amax = fmaxf(amax, fp8_amax<8>(values));
  }
  for (int v = kRowCached * kQuantizeRowThreads + static_cast<int>(threadIdx.x); real && v < vectors; v += kQuantizeRowThreads) {
    unpack_bf16<8>(*reinterpret_cast<const uint4*>(row + v * 8), values);
    amax = fmaxf(amax, fp8_amax<8>(values));
  }
  __shared__ float scratch[kQuantizeRowThreads / 32];
  const float scale = fp8_row_scale<kQuantizeRowThreads>(amax, scratch);
  unsigned char* codes = out.codes + r * k;
#pragma unroll
  for (int c = 0; c < kRowCached; ++c) {
    const int v = c * kQuantizeRowThreads + static_cast<int>(threadIdx.x);
    if (v < vectors) {
      unpack_bf16<8>(raw[c], values);
      store_fp8_codes<8>(values, scale, codes + v * 8);
    }
  }
  for (int v = kRowCached * kQuantizeRowThreads + static_cast<int>(threadIdx.x); v < vectors; v += kQuantizeRowThreads) {
    const uint4 again = real ? *reinterpret_cast<const uint4*>(row + v * 8) : make_uint4(0u, 0u, 0u, 0u);
    unpack_bf16<8>(again, values);
    store_fp8_codes<8>(values, scale, codes + v * 8);
  }
  store_fp8_row_scale<kQuantizeRowThreads>(scale, out, k, padded, r);
}

// Tasks (row, block) from which a warp takes four pairs (the GPU test's 300 rows of 8,192 columns
// do; its 17, and 300 of 2,048, take one).
constexpr long long kManyQuantizeTasks = 8192;

// rows × k bf16 (k a multiple of 128, `in` 16-byte aligned) -> `out`'s fp8_gemm_rows(rows) rows.
inline void launch_quantize_rows_fp8(const bf16* in, int rows, int k, Fp8Rows out, cudaStream_t stream) {
  const int padded = fp8_gemm_rows(rows);
  if (out.row_scale) {
    KILN_LAUNCH(quantize_rows_fp8_row_scale_kernel<8>, padded, kQuantizeRowThreads, 0, stream, in, rows, padded, k, out);
    return;
  }
  const long long tasks = static_cast<long long>(padded) * (k / kFp8InputBlock);
  // Four pairs of blocks a warp where there are many (a prefill chunk's thousands of rows); one
  // where there are few, which more warps cover sooner (16 rows of 4,096: 4.9 µs in four, 2.7 in
  // one, 2.6 in the earlier kernel's one block a warp; 2,048 rows: 13.8 µs in four, 16.3 earlier).
  const auto launch = [&](auto kernel, int steps) {
    const long long threads = (tasks + 2 * steps - 1) / (2 * steps) * 32;
    KILN_LAUNCH(kernel, static_cast<unsigned>((threads + 255) / 256), 256, 0, stream, in, rows, padded, k, out);
  };
  if (tasks >= kManyQuantizeTasks) {
    launch(quantize_rows_fp8_kernel<4>, 4);
  } else {
    launch(quantize_rows_fp8_kernel<1>, 1);
  }
}

// The padding rows [rows, padded) alone: zero codes, scale 1 (a thread per 16 codes and its scale).
template <int kThreads>
__global__ void __launch_bounds__(kThreads) fp8_padding_rows_kernel(int rows, int padded, int k, Fp8Rows out) {
  pdl_release_and_wait();
  const int chunks = k / 16;
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= (padded - rows) * chunks) return;
  const int row = rows + i / chunks, chunk = i % chunks;
  *reinterpret_cast<uint4*>(out.codes + static_cast<long long>(row) * k + chunk * 16) = make_uint4(0u, 0u, 0u, 0u);
  if (chunk * 16 % kFp8InputBlock == 0) {
    out.scales[static_cast<long long>(chunk * 16 / kFp8InputBlock) * padded + row] = 1.0f;
  }
}

inline void launch_fp8_padding_rows(int rows, int k, Fp8Rows out, cudaStream_t stream) {
  const int padded = fp8_gemm_rows(rows);
  if (padded == rows) return;
  constexpr int kThreads = 256;
  KILN_LAUNCH(fp8_padding_rows_kernel<kThreads>, ceil_div((padded - rows) * (k / 16), kThreads), kThreads, 0, stream,
              rows, padded, k, out);
}

}  // namespace kiln::detail
