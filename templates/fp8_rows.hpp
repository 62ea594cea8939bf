// A prefill projection's inputs in FP8 (E4M3), the form the prefill's FP8 GEMM multiplies
// (runtime/cuda/gemm.hpp): each token's row quantized per 128 columns, as DeepSeek's and vLLM's FP8
// inference do with the published 128 × 128-block checkpoints (cuBLASLt's VEC128 input scales beside
// the weights' BLK128x128). runtime/cuda/quantize_rows.hpp writes them from bf16 rows; RMSNorm and
// silu·mul write them in place of their bf16 rows where the projection after them is FP8
// (codegen/fuse.cpp), which saves the pass over the rows.
//
// Per (row, 128 columns): scale = max |x| / 448 (E4M3's largest finite value; 1 for zeros), code =
// x · (1 / scale) rounded to the nearest E4M3 (ties to even; the reciprocal and the product each
// rounded to fp32), x the bf16 value the unfused op would have written: fused or not, the GEMM sees
// the same bits (templates/blocks/fp8_quantize.cuh).
//
// Or per row (`row_scale`): one scale per token, max |x| over the whole row / 448, written in each
// of the row's 128-column slots. That is the form of matrices quantized at load with one scale
// (--quantize fp8, as vLLM's online FP8 does): cuBLASLt then multiplies per output channel × per
// token (OUTER_VEC), 7% faster than its block-scaled kernel over Qwen3-8B's 2,048-token prefill on
// an H200 (bench/RESULTS.md, eighteenth session), and reads the slots of the first 128 columns as
// its vector of per-token scales. The attention, which sees a row one head at a time, writes its
// projection's inputs per 128 columns even then (runtime/cuda/gemm.hpp's fp8_head_inputs_for). E4M3 is a float format: a value's relative rounding error is the
// same under any scale while it stays within the 2^-6..448 normal range, which one scale for a
// whole row (or matrix) moves only for values below about 2^-15 of the largest.
#pragma once

#include "templates/host_device.hpp"  // plain C++ (no system includes): NVRTC reads it too

namespace kiln {

// Columns a scale of the inputs covers (cuBLASLt's VEC128).
constexpr int kFp8InputBlock = 128;
// cuBLASLt's FP8 GEMM with these scales runs on row counts that are multiples of 4 only (cuBLASLt
// 13.1 on an H200: no algorithm at the others, nor a heuristic of their own): the inputs are padded
// with zero rows to the next multiple, and the GEMM writes that many output rows.
constexpr int kFp8GemmRows = 4;
KILN_HOST_DEVICE constexpr int fp8_gemm_rows(int rows) { return (rows + kFp8GemmRows - 1) / kFp8GemmRows * kFp8GemmRows; }

// Where the FP8 rows go: codes [padded][k] and scales [k / 128][padded] fp32 (the layout cuBLASLt
// reads; padded = fp8_gemm_rows(rows), the rows past `rows` zero codes with scale 1). Empty (null
// codes): the op writes its bf16 rows instead.
struct Fp8Rows {
  unsigned char* codes = nullptr;
  float* scales = nullptr;
  bool row_scale = false;  // one scale per row (above), else one per 128 columns
  KILN_HOST_DEVICE explicit operator bool() const { return codes != nullptr; }
};

}  // namespace kiln
