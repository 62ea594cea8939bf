// The fast CPU backend's dot products over stored weights: ggml's Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 /
// Q2_K / Q3_K / Q4_K / Q5_K / Q6_K blocks, 16 rows interleaved, against activations quantized per
// 32 values (Q8Block: the products are then integer, a 32-bit lane per row), and bf16 rows against
// fp32 activations. One kernel per format and instruction set (AVX-512 VNNI, AVX2, portable), chosen
// at start from what the processor has.
#pragma once

#include <cstddef>
#include <cstdint>

#include "templates/weight_matrix.hpp"

namespace kiln::cpu {

// 32 activations of one token (one block of the weights'), quantized for the integer dot
// products in two 8-bit parts: q = round(x / d) with d = max|x| / 127, then
// lo = round(128 · (x / d - q)), so that x ≈ step · (128·q + lo) with step = d / 128. One 8-bit
// part alone (llama.cpp's Q8_0 / Q8_1 activations) leaves an error of about 5e-5 of each
// projection's input, which on SmolLM2-135M turns "The capital of France is Paris." into another
// answer (its top two first tokens are 0.08 apart); the two parts leave about 1e-9, below bf16
// activations, for a second integer product. `total` serves the formats whose quants are stored
// with an offset (value = scale · (u - offset): Q8_0's + 128, Q4_0's 8, Q5_0's 16, Q3_K's 4, Q6_K's
// 32), whose Σ w·x takes -offset · total (Q2_K, Q3_K, Q6_K, a scale per 16 values: per half,
// total_first and total - total_first); `sum` those with a min (value = scale · u + min), whose Σ
// takes min · Σx (Q2_K's, a min per 16 values: step times each half's total).
struct alignas(16) Q8Block {
  int8_t q[32];
  int8_t lo[32];
  float step;
  int32_t total;        // Σ (128·q + lo)
  float sum;            // step · total: Σx as the products see it
  int32_t total_first;  // Σ (128·q + lo) over the first 16 values
};
static_assert(sizeof(Q8Block) == 80);

// x: k values (k a multiple of 32) into k / 32 blocks.
void quantize_activations(const float* x, int64_t k, Q8Block* out);

// One tile of a projection: out[t·out_stride + r] (=, or += with accumulate) Σ_c w[r, c] · x[t, c]
// for rows [0, rows) and tokens [0, tokens). Block formats: w is the first of the groups of 16
// rows (templates/weight_matrix.hpp), `stride` bytes apart, x Q8Block blocks (act_stride per
// token); bf16: w the first row, `stride` bytes apart, x fp32 values (act_stride per token).
struct DotArgs {
  const std::byte* w;
  int64_t stride;
  int64_t rows;
  const void* x;
  int64_t act_stride;
  int64_t tokens;
  int64_t k;
  float* out;
  int64_t out_stride;
  bool accumulate;
};
using DotKernel = void (*)(MatrixFormat format, const DotArgs& args);

// The kernel for this processor (decided once), and its instruction set's name.
DotKernel dot_kernel();
const char* dot_isa();

// Each instruction set's kernel (tests compare them); null where this processor lacks it.
DotKernel dot_kernel_avx512_vnni();
DotKernel dot_kernel_avx2();
DotKernel dot_kernel_portable();

}  // namespace kiln::cpu
