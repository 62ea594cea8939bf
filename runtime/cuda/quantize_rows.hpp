// The prefill's FP8 GEMM (gemm.hpp's run_fp8) multiplies E4M3 weights by E4M3 inputs: each token's
// bf16 row quantized per 128 columns, as DeepSeek's and vLLM's FP8 inference do with the published
// 128 × 128-block checkpoints (cuBLASLt's VEC128 scales for the inputs beside BLK128x128 for the
// weights: 1.5-1.7× the bf16 GEMM's speed at 2048 rows on an H200, bench/RESULTS.md).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kiln::cuda {

// Columns a scale of the inputs covers (cuBLASLt's VEC128).
constexpr int kFp8InputBlock = 128;
// cuBLASLt's FP8 GEMM with these scales runs on row counts that are multiples of 4 only (cuBLASLt
// 13.1 on an H200: no algorithm at the others, nor a heuristic of their own): the inputs are padded
// with zero rows to the next multiple, and the GEMM writes that many output rows.
constexpr int kFp8GemmRows = 4;
inline int fp8_gemm_rows(int rows) { return (rows + kFp8GemmRows - 1) / kFp8GemmRows * kFp8GemmRows; }

// rows × k bf16 (k a multiple of 128) -> codes [padded][k] E4M3 and scales [k / 128][padded] fp32
// (the layout cuBLASLt reads; padded = fp8_gemm_rows(rows), the rows past `rows` zero codes with
// scale 1): per (row, 128 columns) scale = max |x| / 448 (1 for zeros), code = x / scale rounded to
// the nearest E4M3 (ties to even), as runtime/core/dtype.hpp's f32_to_f8e4m3.
void quantize_rows_fp8(const __nv_bfloat16* in, int rows, int k, uint8_t* codes, float* scales, cudaStream_t stream);

}  // namespace kiln::cuda
