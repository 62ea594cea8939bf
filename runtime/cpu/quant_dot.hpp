// The fast CPU backend's dot products over stored weight rows: ggml's Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q4_K blocks
// against activations quantized per 32 values (Q8Pair: the products are then integer, 64 at a
// time), and bf16 rows against fp32 activations. One kernel per format and
// instruction set (AVX-512 VNNI, AVX2, portable), chosen at start from what the processor has.
#pragma once

#include <cstddef>
#include <cstdint>

#include "templates/weight_matrix.hpp"

namespace kiln::cpu {

// 64 activations of one token (a pair of blocks, in the weights' dot order: cpu_matrix_bytes in
// templates/weight_matrix.hpp), quantized for the integer dot products in two 8-bit parts per
// block: q = round(x / d) with d = max|x| / 127, then lo = round(128 · (x / d - q)), so that
// x ≈ step · (128·q + lo) with step = d / 128. One 8-bit part alone (llama.cpp's Q8_0 / Q8_1
// activations) leaves an error of about 5e-5 of each projection's input, which on SmolLM2-135M
// turns "The capital of France is Paris." into another answer (its top two first tokens are 0.08
// apart); the two parts leave about 1e-9, below bf16 activations, for a second integer product.
// The lane vectors follow the dot's lanes (block 0 in even lanes, block 1 in odd ones) and fold
// the weights' offsets into the same vector operations: Q4_0's value is (nibble - 8)·scale, so
// Σ w·x takes -8·Σ(128·q + lo) per block (Q5_0's, 16 instead of 8, twice that); Q4_1's and Q4_K's
// are q·scale + min, so they take min·Σx. Those two are set in lanes 0 and 1 only, so a vector
// sum adds them once.
struct alignas(64) Q8Pair {
  int8_t q[64];
  int8_t lo[64];
  float step[16];      // [step0, step1, step0, step1, …]
  float sum[16];       // [Σx of block 0, of block 1, 0, …]
  int32_t offset[16];  // [-8·Σ(128·q + lo) of block 0, of block 1, 0, …]
};
static_assert(sizeof(Q8Pair) == 320);

// Pairs of a row of k values (k a multiple of 32; an odd last block's partner is zero).
constexpr int64_t activation_pairs(int64_t k) { return (k + 63) / 64; }

// x: k values into activation_pairs(k) pairs.
void quantize_activations(const float* x, int64_t k, Q8Pair* out);

// One tile of a projection: out[t·out_stride + r] (=, or += with accumulate) Σ_c w[r, c] · x[t, c]
// for rows [0, rows) and tokens [0, tokens). w: `rows` stored rows of row_bytes each; x: Q8Pair
// pairs (block formats, act_stride pairs per token) or fp32 values (bf16, act_stride per token).
struct DotArgs {
  const std::byte* w;
  int64_t row_bytes;
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
