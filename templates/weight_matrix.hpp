// A projection weight as a backend holds it. On the GPU: bf16 rows, a GGUF block format kept
// quantized (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), or FP8 (E4M3 with block scales: an FP8 checkpoint's, or
// --quantize fp8's) in a layout the decode GEMV streams with 16-byte loads (linear_quant.cuh).
// On the CPU: fp32 rows (the reference backend), or, on the fast CPU backend, bf16 rows or the
// file's Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q2_K / Q3_K / Q4_K / Q5_K / Q6_K blocks in the layout of cpu_matrix_bytes below
// (runtime/cpu reads it), or bf16 rows packed losslessly in 12 bits a value (bf16_packed, where the
// CPU's kernel unpacks them: runtime/cpu/bf16_pack.hpp).
// The loader chooses per tensor and layer (runtime/model/weight_loader.cpp): a binary runs whatever
// mix of these formats its file holds, so one build serves every quantization of the model.
//
// The GPU's quantized layout, below, is the one the rest of this file describes.
// Quantized layout of an [n, k] matrix: k is cut into blocks of 32 values (ggml's blocks, same
// values and fp16 scales) and the blocks of a row into groups of kGroupBlocks (a group is 64
// quant bytes: 4 lanes × 16 bytes). Row r's group s holds, for lane q = 0..3, the quants of
// columns 8q..8q+7 of each of its blocks:
//   q8_0 (2 blocks a group)  lane q: block 0's 8 int8, then block 1's 8 int8
//   q4_0 (4 blocks a group)  lane q: one 32-bit word per block; its 8 nibbles (ggml's 0..15,
//                            value = (nibble - 8) · scale) are columns 8q + 2p at bits 4p..4p+3
//                            and 8q + 2p + 1 at bits 16 + 4p..16 + 4p + 3 (p = 0..3), so that
//                            (word >> 4p) & 0x000F000F is the pair (8q + 2p, 8q + 2p + 1)
//   q4_1 (4 blocks a group)  as q4_0 (nibbles 0..15, value = nibble · d + m)
//   q5_0 (4 blocks a group)  as q4_0 with the low 4 bits of ggml's 5-bit quants u (value =
//                            (u - 16) · d); their fifth bits are a second area
//   q5_1 (4 blocks a group)  as q5_0 (value = u · d + m)
//   q4_k (4 blocks a group)  as q4_0, the blocks being the 32-value sub-blocks of ggml's 256-value
//                            super-blocks (nibbles 0..15, value = d·sc · nibble - dmin·m): a
//                            super-block is two groups
//   q5_k (4 blocks a group)  as q4_k with the low 4 bits of ggml's 5-bit quants u (value =
//                            d·sc · u - dmin·m); their fifth bits are a second area, as q5_0's
//   q6_k (4 blocks a group)  as q4_k, with the low 4 bits of ggml's 6-bit quants u (value =
//                            d·sc · (u - 32), a scale sc per 16 columns), but lane q holds columns
//                            4q..4q+3 and 16+4q..16+4q+3 of each block: pair p = (c, c + 1) with
//                            c = 4q, 4q + 2, 16 + 4q, 16 + 4q + 2 for p = 0..3, so that the first
//                            of the GEMV's two k16 mmas of a block sees columns 0..15 (one scale)
//                            and the second 16..31. The high 2 bits of u are a second area
//   q2_k (8 blocks a group)  2-bit quants u (0..3, value = d·sc · u - dmin·m, a scale and a min per
//                            16 columns): a group is a whole 256-value super-block, lane q's 16
//                            bytes 16 bits of each of its 8 blocks, in Q6_K's lane columns (4q..4q+3
//                            and 16+4q..16+4q+3): block 2i + e in word i, pair p's first column at
//                            bits 8e + 2p and its second at 16 + 8e + 2p (Q6_K's high bits' layout)
//   q3_k (8 blocks a group)  as q2_k with the low 2 bits of ggml's 3-bit quants u (value = d·sc ·
//                            (u - 4)); their third bits are a second area
//   fp8 (2 blocks a group)   the E4M3 codes row-major (row r at r · groups · 64 bytes): lane q
//                            holds the group's columns 16q..16q+15, its "block" b the 8 of them
//                            from 16q + 8b, so that cuBLASLt's FP8 GEMM reads the rows as they are
// Then the scales: q8_0 / q4_0 [n][groups · kGroupBlocks] fp16; q4_1 the same of (fp16 d, fp16 m)
// pairs; q5_0, q5_1 and q5_k first their fifth bits [n][groups] 16 bytes (lane q's 4: block b's
// column 8q + 2p at bit 4b + p, 8q + 2p + 1 at 16 + 4b + p, so that a shift puts pair p's two at
// the bits above its nibbles, as Q6_K's), then q5_0 q4_0's fp16 scales, q5_1 q4_1's pairs and
// q5_k q4_k's headers; q4_k [n][k / 256] 16-byte headers, each the first 16 bytes of ggml's
// block_q4_K (or block_q5_K) as stored (fp16 d, fp16 dmin, the 12 bytes of 6-bit sub-block scales
// and mins); q6_k first its high bits [n][groups] 32 bytes (lane q's 8:
// 16 bits a block, block 2i + e in word i with pair p's first column at bits 8e + 2p and its
// second at 16 + 8e + 2p), then [n][k / 256] 16 int8 sub-block scales (ggml's, in column order)
// and [n][k / 256] fp16 d; q2_k [n][groups] 16 bytes of 4-bit sub-block scales and mins (ggml's
// scales as stored: byte j is columns 16j..16j+15's sc | m << 4), then [n][groups] (fp16 d, fp16
// dmin); q3_k first its third bits [n][groups] 32 bytes (lane q's 8: 8 bits a block, block 4i + e
// in word i with pair p's first column at bit 4e + p and its second at 16 + 4e + p, as q5_0's
// fifth bits), then ggml's 12 bytes of 6-bit sub-block scales as [n][groups] 8 bytes (their low
// 4 bits, bytes 0..7) and [n][groups] 4 bytes (their high 2 bits, bytes 8..11), then [n][groups]
// fp16 d; fp8 [ceil(n / 128)][ceil(k / 128)] fp32 scales, one per block of 128
// rows × 128 columns (value = code · scale), as the published FP8 checkpoints store them and as
// cuBLASLt's BLK128x128 scale mode reads them. So the matrix takes exactly the file's bytes.
// Blocks past k (the last group of a row whose block count is not a multiple of kGroupBlocks)
// hold zero quants and a zero scale.
//
// Plain C++ (no includes but host_device.hpp): nvcc, NVRTC, kilnc and the loader all read it.
#pragma once

#include "templates/host_device.hpp"

namespace kiln {

enum class MatrixFormat : unsigned char {
  bf16, q8_0, q4_0, q4_1, f32, q5_0, q4_k, q6_k, fp8, bf16_packed, q5_1, q5_k, q2_k, q3_k
};
constexpr int kMatrixFormats = 14;

// The quantized formats (GGUF's blocks, FP8); bf16_packed holds bf16 values, as the file's.
KILN_HOST_DEVICE constexpr bool is_block_format(MatrixFormat f) {
  return f != MatrixFormat::bf16 && f != MatrixFormat::f32 && f != MatrixFormat::bf16_packed;
}
// The block formats the fast CPU backend reads (FP8 is the GPU's only).
KILN_HOST_DEVICE constexpr bool is_cpu_block_format(MatrixFormat f) { return is_block_format(f) && f != MatrixFormat::fp8; }

struct GpuMatrix {
  const void* data = nullptr;
  MatrixFormat format = MatrixFormat::bf16;
  // FP8 quantized at load with one scale for the whole matrix (every block's scale holds it too):
  // that scale, which the prefill's per-token FP8 GEMM takes from the host (runtime/cuda/gemm.hpp);
  // 0 for every other matrix.
  float fp8_scale = 0.0f;
  // A matrix stacked from pieces a GGUF file stores in two block formats (a Q4_K_M file's
  // qkv_proj: q and k in Q4_K, v in Q6_K in some layers): rows [0, split) are an [split, k] matrix
  // at `data` in `format`, rows [split, n) an [n - split, k] one at `tail` in `tail_format`, each
  // in its format's layout below, so that both keep the file's bytes. split 0: one matrix. The
  // fast CPU backend's CpuMatrix has the same fields.
  int split = 0;
  const void* tail = nullptr;
  MatrixFormat tail_format = MatrixFormat::bf16;
};

struct CpuMatrix {
  const void* data = nullptr;
  MatrixFormat format = MatrixFormat::f32;
  // Two block formats, as GpuMatrix's (the fast CPU backend's layout for each part).
  int split = 0;
  const void* tail = nullptr;
  MatrixFormat tail_format = MatrixFormat::f32;
};

// The field type of a projection weight in a generated Weights<T>: a CpuMatrix on the CPU (T is
// float there), a GpuMatrix on the GPU.
template <typename T>
struct MatrixOf {
  using type = GpuMatrix;
};
template <>
struct MatrixOf<float> {
  using type = CpuMatrix;
};
template <typename T>
using Matrix = typename MatrixOf<T>::type;

constexpr int kQuantBlockValues = 32;  // values per block (ggml's QK8_0, QK4_0)
constexpr int kQuantGroupBytes = 64;   // quant bytes of one row's group: 4 lanes × 16 bytes

// The formats of 2-bit quants in the group bytes (Q2_K; Q3_K, whose third bits are apart): a
// lane's 16 bytes hold 8 blocks' columns.
KILN_HOST_DEVICE constexpr bool has_two_bit_quants(MatrixFormat f) {
  return f == MatrixFormat::q2_k || f == MatrixFormat::q3_k;
}

KILN_HOST_DEVICE constexpr int quant_group_blocks(MatrixFormat f) {
  return f == MatrixFormat::q8_0 || f == MatrixFormat::fp8 ? 2 : has_two_bit_quants(f) ? 8 : 4;
}

// The formats whose super-blocks start with a 16-byte header (fp16 d, fp16 dmin, 6-bit scales and
// mins of the 32-value sub-blocks): Q4_K, Q5_K.
KILN_HOST_DEVICE constexpr bool has_super_headers(MatrixFormat f) {
  return f == MatrixFormat::q4_k || f == MatrixFormat::q5_k;
}
// The formats of ggml's 256-value super-blocks, whose scales are per 32 (Q4_K, Q5_K) or 16 values
// (Q2_K, Q3_K, Q6_K) under a super-block's d.
KILN_HOST_DEVICE constexpr bool is_k_quant(MatrixFormat f) {
  return has_super_headers(f) || f == MatrixFormat::q6_k || has_two_bit_quants(f);
}
// The formats of a scale per 16 columns, whose lanes hold columns 4q..4q+3 and 16+4q..16+4q+3 of a
// block (Q6_K's lane columns).
KILN_HOST_DEVICE constexpr bool has_half_block_scales(MatrixFormat f) {
  return f == MatrixFormat::q6_k || has_two_bit_quants(f);
}
// The formats of 5-bit quants: a 4-bit nibble each where Q4_0 / Q4_K keep it, the fifth bits apart.
KILN_HOST_DEVICE constexpr bool has_fifth_bits(MatrixFormat f) {
  return f == MatrixFormat::q5_0 || f == MatrixFormat::q5_1 || f == MatrixFormat::q5_k;
}

constexpr int kQ4kSuperValues = 256;  // values of a K-quant super-block (ggml's QK_K)
constexpr int kQ4kHeaderBytes = 16;   // Q4_K's and Q5_K's d, dmin and packed sub-block scales
constexpr int kQ6kHighGroupBytes = 32;  // a Q6_K (or Q3_K) row's high bits of one group: 4 lanes × 8 bytes
constexpr int kQ6kScaleBytes = 16;      // a Q6_K super-block's int8 sub-block scales
constexpr int kQ5HighGroupBytes = 16;   // a Q5_0 / Q5_1 / Q5_K row's fifth bits of one group: 4 lanes × 4 bytes

// Groups per row of k values.
KILN_HOST_DEVICE constexpr long long quant_row_groups(MatrixFormat f, long long k) {
  const long long blocks = (k + kQuantBlockValues - 1) / kQuantBlockValues;
  return (blocks + quant_group_blocks(f) - 1) / quant_group_blocks(f);
}

// Bytes of the quants of all n rows: the scales start there.
KILN_HOST_DEVICE constexpr long long quant_scales_offset(MatrixFormat f, long long n, long long k) {
  return n * quant_row_groups(f, k) * kQuantGroupBytes;
}

// Where the areas after the quants' high bits (which start at quant_scales_offset) begin: the fp16
// block scales of Q8_0, Q4_0, Q4_1 (with their mins), Q5_0 and Q5_1; Q4_K's and Q5_K's headers;
// Q6_K's sub-block scales (then its d); Q2_K's scales and mins (then its d and dmin); Q3_K's
// scales' low bits (then their high bits, then its d).
KILN_HOST_DEVICE constexpr long long quant_after_high_offset(MatrixFormat f, long long n, long long k) {
  const int high = has_fifth_bits(f)                                       ? kQ5HighGroupBytes
                   : f == MatrixFormat::q6_k || f == MatrixFormat::q3_k ? kQ6kHighGroupBytes
                                                                          : 0;
  return quant_scales_offset(f, n, k) + n * quant_row_groups(f, k) * high;
}
KILN_HOST_DEVICE constexpr long long q6k_d_offset(long long n, long long k) {
  return quant_after_high_offset(MatrixFormat::q6_k, n, k) + n * (k / kQ4kSuperValues) * kQ6kScaleBytes;
}
constexpr int kQ2kScaleBytes = 16;    // a Q2_K super-block's 4-bit scales and mins
constexpr int kQ3kScaleLowBytes = 8;  // a Q3_K super-block's scales' low 4 bits ...
constexpr int kQ3kScaleHighBytes = 4;  // ... and their high 2 bits
// Q2_K's (fp16 d, fp16 dmin) pairs; Q3_K's scales' high bits, then its fp16 d.
KILN_HOST_DEVICE constexpr long long q2k_d_offset(long long n, long long k) {
  return quant_after_high_offset(MatrixFormat::q2_k, n, k) + n * (k / kQ4kSuperValues) * kQ2kScaleBytes;
}
KILN_HOST_DEVICE constexpr long long q3k_scale_high_offset(long long n, long long k) {
  return quant_after_high_offset(MatrixFormat::q3_k, n, k) + n * (k / kQ4kSuperValues) * kQ3kScaleLowBytes;
}
KILN_HOST_DEVICE constexpr long long q3k_d_offset(long long n, long long k) {
  return q3k_scale_high_offset(n, k) + n * (k / kQ4kSuperValues) * kQ3kScaleHighBytes;
}

// Bytes a block's scale takes there: Q4_1's and Q5_1's min comes with its d.
KILN_HOST_DEVICE constexpr int quant_block_scale_bytes(MatrixFormat f) {
  return f == MatrixFormat::q4_1 || f == MatrixFormat::q5_1 ? 4 : 2;
}

// FP8's scale blocks (rows × columns), and the scales of an [n, k] matrix: they start at
// quant_scales_offset, block row (r / 128)'s (k + 127) / 128 of them one after another.
constexpr int kFp8BlockRows = 128;
constexpr int kFp8BlockCols = 128;
KILN_HOST_DEVICE constexpr long long fp8_scale_cols(long long k) { return (k + kFp8BlockCols - 1) / kFp8BlockCols; }
KILN_HOST_DEVICE constexpr long long fp8_scale_count(long long n, long long k) {
  return (n + kFp8BlockRows - 1) / kFp8BlockRows * fp8_scale_cols(k);
}
// Whether the prefill multiplies an [n, k] FP8 matrix on the tensor cores' FP8 path (cuBLASLt's
// 128 × 128-block scales), rather than expanding it to bf16 rows first: whole blocks each way, and
// rows of block scales that are whole 16 bytes (k / 128 a multiple of 4). cuBLASLt 13.1 read the
// scales wrong otherwise (k = 128 and 640: NMSE near 1 on an H200, 2026-11-27), as it runs the
// inputs' scales, [k / 128][rows], only at multiples of 4 rows.
KILN_HOST_DEVICE constexpr bool fp8_gemm_shape(long long n, long long k) {
  return n % kFp8BlockRows == 0 && k % (4 * kFp8BlockCols) == 0;
}
// Bytes from one row's FP8 codes to the next's (whole groups: k rounded up to 64).
KILN_HOST_DEVICE constexpr long long fp8_row_bytes(long long k) {
  return quant_row_groups(MatrixFormat::fp8, k) * kQuantGroupBytes;
}

// Bytes an [n, k] matrix takes on the GPU in format f.
KILN_HOST_DEVICE constexpr long long matrix_bytes(MatrixFormat f, long long n, long long k) {
  if (f == MatrixFormat::bf16) return n * k * 2;
  if (has_super_headers(f)) {
    return quant_after_high_offset(f, n, k) + n * (k / kQ4kSuperValues) * kQ4kHeaderBytes;
  }
  if (f == MatrixFormat::q6_k) return q6k_d_offset(n, k) + n * (k / kQ4kSuperValues) * 2;
  if (f == MatrixFormat::q2_k) return q2k_d_offset(n, k) + n * (k / kQ4kSuperValues) * 4;
  if (f == MatrixFormat::q3_k) return q3k_d_offset(n, k) + n * (k / kQ4kSuperValues) * 2;
  if (f == MatrixFormat::fp8) return quant_scales_offset(f, n, k) + fp8_scale_count(n, k) * 4;
  return quant_after_high_offset(f, n, k) +
         n * quant_row_groups(f, k) * quant_group_blocks(f) * quant_block_scale_bytes(f);
}

// ... and a GpuMatrix of n rows, both its parts where it has two (a decode step reads them all).
KILN_HOST_DEVICE constexpr long long matrix_bytes(const GpuMatrix& m, long long n, long long k) {
  if (m.split == 0) return matrix_bytes(m.format, n, k);
  return matrix_bytes(m.format, m.split, k) + matrix_bytes(m.tail_format, n - m.split, k);
}

// The fast CPU backend's layout of a block format: rows in groups of 16 (the last group padded
// with zero rows), a group's k / 32 blocks one after another, each block one record of the 16
// rows' 32 columns in the order of the integer dot products (runtime/cpu/quant_dot_impl.hpp): a
// 32-bit lane per row, so that byte 4·r + i of the record's 64-byte vector j belongs to row r.
//   Q8_0: 8 vectors, byte 4·r + i of vector j column 4·j + i as value + 128 (unsigned 0..255);
//   4-bit formats: 4 vectors, byte 4·r + i of vector j column 4·j + i in its low nibble and
//     column 16 + 4·j + i in its high one (the file's 0..15);
//   Q5_0, Q5_1, Q5_K: then one vector of fifth bits, bit j of byte 4·r + i column 4·j + i's 16;
//   Q6_K: the low 4 bits of ggml's 6-bit quants u as the 4-bit formats' nibbles, then two
//     vectors of high bits, bit j of byte 4·r + i of the first column 4·j + i's 16, of the
//     second its 32;
//   Q2_K, Q3_K: 2 vectors, bits 2·s, 2·s + 1 of byte 4·r + i of vector v column 4·(4·v + s) + i
//     (the file's 0..3); Q3_K then one vector of third bits (bit j: column 4·j + i's 4), so that
//     u = the low bits + 4 · the third bit is ggml's q + 4 (value = d·sc · (u - 4));
//   then the 16 rows' scales: fp16 d (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1); the int8 sub-block scales sc
//     of the K-quants (Q4_K, Q5_K: one a row; Q2_K, Q3_K, Q6_K: those of columns 0..15, then
//     those of columns 16..31; Q3_K's as ggml means them, its 6-bit scales - 32);
//   then the mins: Q4_1's and Q5_1's fp16 m (value = d · u + m); the K-quants' int8 sub-block
//     mins m (Q4_K, Q5_K one a row, Q2_K two, as its scales: value = d·sc · u - dmin·m).
// The K-quants' super-block scales stay once per 256 values: before each 8 records, a header of
// the 16 rows' fp16 d, then (Q2_K, Q4_K, Q5_K) their fp16 -dmin. Values, scales and bytes are
// ggml's (repack_cpu_row, runtime/weights/quant_repack.hpp): decode streams the weights from
// memory, so the layout adds few bytes besides the padding rows: a sub-block scale (and min) a
// byte where the file packs them in 6 (Q4_K, Q5_K) or 4 bits (Q2_K), ggml's bytes elsewhere (Q4_K
// 4.625 bits a weight where the file holds 4.5, Q5_K 5.625 / 5.5, Q6_K 6.5625 as the file, Q3_K
// 3.5625 / 3.4375, Q2_K 3.125 / 2.625).
constexpr long long kCpuRowGroup = 16;

// The low bits of each quant in the record's first vectors, and their bytes.
KILN_HOST_DEVICE constexpr int cpu_low_bits(MatrixFormat f) {
  return f == MatrixFormat::q8_0 ? 8 : has_two_bit_quants(f) ? 2 : 4;
}
KILN_HOST_DEVICE constexpr long long cpu_quant_bytes(MatrixFormat f) { return 64 * cpu_low_bits(f); }
// The vectors of high bits after them (64 bytes each): the 5-bit formats' fifth bits, Q6_K's
// fifth and sixth, Q3_K's third.
KILN_HOST_DEVICE constexpr int cpu_high_bit_planes(MatrixFormat f) {
  return has_fifth_bits(f) || f == MatrixFormat::q3_k ? 1 : f == MatrixFormat::q6_k ? 2 : 0;
}
KILN_HOST_DEVICE constexpr bool cpu_has_min(MatrixFormat f) {
  return f == MatrixFormat::q4_1 || f == MatrixFormat::q5_1 || has_super_headers(f) || f == MatrixFormat::q2_k;
}
// Where a record's scales start, the bytes a row's take (an fp16, or the K-quants' int8 sub-block
// scales: one for Q4_K's and Q5_K's 32 columns, two where a scale is per 16), and where its mins
// start (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K).
KILN_HOST_DEVICE constexpr long long cpu_scales_at(MatrixFormat f) {
  return cpu_quant_bytes(f) + 64 * cpu_high_bit_planes(f);
}
KILN_HOST_DEVICE constexpr long long cpu_scale_bytes(MatrixFormat f) {
  return has_super_headers(f) ? 1 : 2;
}
KILN_HOST_DEVICE constexpr long long cpu_mins_at(MatrixFormat f) {
  return cpu_scales_at(f) + kCpuRowGroup * cpu_scale_bytes(f);
}
// Bytes of one block record of a group of rows.
KILN_HOST_DEVICE constexpr long long cpu_block_bytes(MatrixFormat f) {
  return cpu_mins_at(f) + (cpu_has_min(f) ? kCpuRowGroup * cpu_scale_bytes(f) : 0);
}
// The K-quants' header (the 16 rows' fp16 d, then their fp16 -dmin) and the records it serves.
KILN_HOST_DEVICE constexpr long long cpu_header_bytes(MatrixFormat f) {
  return is_k_quant(f) ? 2 * kCpuRowGroup * (cpu_has_min(f) ? 2 : 1) : 0;
}
KILN_HOST_DEVICE constexpr long long cpu_header_blocks(MatrixFormat f) {
  return is_k_quant(f) ? kQ4kSuperValues / kQuantBlockValues : 1;
}
// Where block b's header and record start in its group's bytes.
KILN_HOST_DEVICE constexpr long long cpu_header_at(MatrixFormat f, long long b) {
  return b / cpu_header_blocks(f) * (cpu_header_bytes(f) + cpu_header_blocks(f) * cpu_block_bytes(f));
}
KILN_HOST_DEVICE constexpr long long cpu_record_at(MatrixFormat f, long long b) {
  return cpu_header_at(f, b) + cpu_header_bytes(f) + b % cpu_header_blocks(f) * cpu_block_bytes(f);
}

// Bytes an [n, k] matrix takes on the CPU in format f (block formats: k a multiple of 32, the
// K-quants' of 256).
KILN_HOST_DEVICE constexpr long long cpu_matrix_bytes(MatrixFormat f, long long n, long long k) {
  if (f == MatrixFormat::f32) return n * k * 4;
  if (f == MatrixFormat::bf16) return n * k * 2;
  return (n + kCpuRowGroup - 1) / kCpuRowGroup * cpu_header_at(f, k / kQuantBlockValues);
}

}  // namespace kiln
