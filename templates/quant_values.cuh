// A GGUF block format's values as the GPU reads them from a quantized GpuMatrix
// (templates/weight_matrix.hpp): a lane's 16 bytes of a group as exact bf16 quants, and the
// group's scales. The decode GEMV (linear_quant.cuh) feeds these to its mmas; decode_chunk gives
// the values themselves, as ggml's dequantize_row_* computes them (the prefill's bf16 rows, the
// embedding's fp32 rows).
#pragma once

#include <cuda_fp16.h>

#include "templates/blocks/mma.cuh"
#include "templates/common.cuh"
#include "templates/weight_matrix.hpp"

namespace kiln {

namespace detail {

__device__ __forceinline__ unsigned bf16x2_sub(unsigned a, unsigned b) {
  const __nv_bfloat162 r =
      __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<const unsigned*>(&r);
}

// (a & mask) | bits in one LOP3. Written as two operations on immediate constants, it compiles to
// two (a SASS LOP3 takes one immediate): a warp's Q4_0 group took 225 instructions, 193 with this.
// On an H200 the quantized GEMV is bound by issue more than by HBM (ncu of Q4_0's gate_up: 0.62
// instructions issued per scheduler cycle, DRAM 38% busy; bench/RESULTS.md, 2026-11-27).
__device__ __forceinline__ unsigned masked_or(unsigned a, unsigned mask, unsigned bits) {
  unsigned r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(mask), "r"(bits));  // 0xEA: (a & b) | c
  return r;
}

// h with each bit kFrom (of the pairs' 16-bit halves) moved to bit kTo: one shift, its direction
// fixed at compile time (the high bits of Q5_*, Q6_K and Q3_K pairs, to sit above their low bits).
template <int kFrom, int kTo>
__device__ __forceinline__ unsigned bits_to(unsigned h) {
  if constexpr (kFrom >= kTo) {
    return h >> (kFrom - kTo);
  } else {
    return h << (kTo - kFrom);
  }
}

__device__ __forceinline__ float half_bits_to_float(unsigned short bits) { return __half2float(__ushort_as_half(bits)); }

// Byte b of w as an exact float: its bits under 2^23's exponent, less 2^23 (a byte permute and an
// add: the integer-to-float conversion runs at a quarter of the rate, and this is per sub-block).
__device__ __forceinline__ float byte_as_float(unsigned w, int b) {
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u | static_cast<unsigned>(b))) - 8388608.0f;
}

// Lane q's high bits (weight_matrix.hpp's area after the quants, kGroupBytes a group) of row r of
// an [n, k] matrix in format F: Q5_0's, Q5_1's and Q5_K's fifth bits, Q6_K's high two, Q3_K's third.
template <MatrixFormat F, int kGroupBytes>
__device__ __forceinline__ const unsigned char* high_bits_row(const unsigned char* matrix, long long n, long long k,
                                                              long long r, int q) {
  return matrix + quant_scales_offset(F, n, k) + r * quant_row_groups(F, k) * kGroupBytes + q * (kGroupBytes / 4);
}

// A format's blocks as the mma takes them: block b of a lane's 16 group bytes as 8 bf16 values
// (columns 8q..8q+7 in order, packed in pairs), and the group's scales.
template <MatrixFormat F>
struct QuantValues;

// A block's multiplier and offset: value = quant · d - m (m = 0 but for Q4_1, Q5_1, Q4_K and Q5_K).
struct BlockScale {
  float d, m;
};

// What the formats but Q6_K share: one scale covers a block's 32 columns, the lane's 8q..8q+7;
// and but for the 5-bit ones (FifthBits) a block's quants are all in the lane's 16 group bytes (no
// high bits area). A format's scales come from a part of their own (Fp16BlockScales, ...).
struct WholeBlocks {
  static constexpr bool kHighBits = false;
  static constexpr bool kHalfScales = false;
  struct High {};  // nothing: the high bits of Q5_0's, Q5_1's, Q5_K's and Q6_K's quants
  // The first of the 8 columns lane q holds of block b, from the group's first column.
  __device__ static __forceinline__ int lane_column(int b, int q) { return b * kQuantBlockValues + q * 8; }
};

// The fp16 scales of Q8_0 / Q4_0 / Q5_0: row r's of an [n, k] matrix, then group `step`'s G of them.
template <MatrixFormat F>
struct Fp16BlockScales {
  static constexpr bool kHasMin = false;
  __device__ static __forceinline__ const unsigned short* row(const unsigned char* matrix, long long n, long long k,
                                                              long long r) {
    return reinterpret_cast<const unsigned short*>(matrix + quant_after_high_offset(F, n, k)) +
           r * quant_row_groups(F, k) * quant_group_blocks(F);
  }
};

// ... of Q4_0 / Q5_0, whose groups are 4 blocks: a group's 4 fp16 scales in one 8-byte load.
template <MatrixFormat F>
struct Fp16GroupOf4Scales : Fp16BlockScales<F> {
  using Scales = uint2;  // the group's 4 fp16 scales of a row
  __device__ static __forceinline__ Scales load_scales(const unsigned short* row, int step) {
    return __ldg(reinterpret_cast<const uint2*>(row + step * 4));
  }
  __device__ static __forceinline__ void group_scales(Scales s, int /*step*/, BlockScale (&out)[4]) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const unsigned w = b < 2 ? s.x : s.y;
      out[b] = {half_bits_to_float(static_cast<unsigned short>(b % 2 == 0 ? w & 0xFFFFu : w >> 16)), 0.0f};
    }
  }
};

// Quants that enter the GEMV's mma as the exact bf16 values 128 + n (Q4_1, Q5_1, Q4_K, Q5_K): the
// mma sums (128 + n)·x, and the block's offset, applied with Σx (kHasMin), takes 128·d·Σx off with
// the min. Saves the subtraction per pair that Q4_0 makes, at the cost of a sum 16 (5-bit: 32)
// times larger than Σn·x before the offset (fp32: a relative error near 1e-6, against bf16 inputs).
struct Offset128 {
  // The GEMV's block offset: the min it subtracts with Σx is m + 128·d (BlockScale's m: value =
  // n · d - m).
  __device__ static __forceinline__ float gemv_offset(const BlockScale& s) { return fmaf(128.0f, s.d, s.m); }
};

// Q4_0's nibble words (weight_matrix.hpp) as 128 + n (Offset128), pair p of a word at a time, and
// a lane's four blocks of them (Q4_1, Q4_K).
struct Offset128Nibbles : Offset128 {
  __device__ static __forceinline__ unsigned pair(unsigned w, int p) {
    return masked_or(w >> (4 * p), 0x000F000Fu, 0x43004300u);
  }
  __device__ static __forceinline__ uint4 block(const uint4& raw, int b) {
    const unsigned w = b == 0 ? raw.x : b == 1 ? raw.y : b == 2 ? raw.z : raw.w;
    return make_uint4(pair(w, 0), pair(w, 1), pair(w, 2), pair(w, 3));
  }
  // The quants as the exact bf16 values n (dequantize_matrix).
  __device__ static __forceinline__ uint4 exact_block(const uint4& raw, int b) {
    return minus(block(raw, b), 0x43004300u);
  }
  // Each bf16 value of v less the bf16 c of both halves.
  __device__ static __forceinline__ uint4 minus(const uint4& v, unsigned c) {
    return make_uint4(bf16x2_sub(v.x, c), bf16x2_sub(v.y, c), bf16x2_sub(v.z, c), bf16x2_sub(v.w, c));
  }
};

// Whole blocks of 5-bit quants, Q5_0, Q5_1 and Q5_K: Q4_0's nibble words and their fifth bits
// (weight_matrix.hpp's area after the quants), a lane's 4 bytes of a group, as the exact bf16 values
// 128 + u (Offset128: Q5_1's and Q5_K's, as Q4_1's and Q4_K's are 128 + n).
template <MatrixFormat F>
struct FifthBits : WholeBlocks, Offset128 {
  static constexpr bool kHighBits = true;
  using High = unsigned;  // a lane's fifth bits of its group: 8 a block
  static constexpr int kHighGroupBytes = kQ5HighGroupBytes;
  __device__ static __forceinline__ const unsigned char* high_row(const unsigned char* matrix, long long n, long long k,
                                                                  long long r, int q) {
    return high_bits_row<F, kHighGroupBytes>(matrix, n, k, r, q);
  }
  __device__ static __forceinline__ unsigned load_high(const unsigned char* p) { return load_streaming_4(p); }
  // Nibble pair p of block b's word w with the pair's fifth bits from h (at bits 4b + p and 16 + 4b
  // + p) as 128 + u.
  template <int p, int b>
  __device__ static __forceinline__ unsigned pair(unsigned w, unsigned h) {
    const unsigned high = bits_to<4 * b + p, 4>(h);  // the fifth bits to bit 4 of each half
    return masked_or(high, 0x00100010u, masked_or(w >> (4 * p), 0x000F000Fu, 0x43004300u));
  }
  template <int b>
  __device__ static __forceinline__ uint4 pairs(unsigned w, unsigned h) {
    return make_uint4(pair<0, b>(w, h), pair<1, b>(w, h), pair<2, b>(w, h), pair<3, b>(w, h));
  }
  // Block b of a lane's group as 128 + u.
  __device__ static __forceinline__ uint4 block(const uint4& raw, High h, int b) {
    return b == 0 ? pairs<0>(raw.x, h) : b == 1 ? pairs<1>(raw.y, h) : b == 2 ? pairs<2>(raw.z, h) : pairs<3>(raw.w, h);
  }
  // ... and as the exact bf16 values u (dequantize_matrix): (128 + u) - 128.
  __device__ static __forceinline__ uint4 exact_block(const uint4& raw, High h, int b) {
    return Offset128Nibbles::minus(block(raw, h, b), 0x43004300u);
  }
};

template <>
struct QuantValues<MatrixFormat::q8_0> : WholeBlocks, Fp16BlockScales<MatrixFormat::q8_0> {
  using Scales = unsigned;  // the group's 2 fp16 scales of a row
  // Two int8 (the bytes `selector` picks into the low byte of each half) as exact bf16: the low
  // 7 bits OR'ed into 128's mantissa give 128 + m; the sign bit into 128's exponent gives 128 or
  // 256; the difference is the two's-complement value.
  __device__ static __forceinline__ unsigned pair(unsigned w, unsigned selector) {
    const unsigned t = __byte_perm(w, 0u, selector);
    return bf16x2_sub(masked_or(t, 0x007F007Fu, 0x43004300u), masked_or(t, 0x00800080u, 0x43004300u));
  }
  __device__ static __forceinline__ uint4 block(const uint4& raw, int b) {
    const unsigned w0 = b == 0 ? raw.x : raw.z, w1 = b == 0 ? raw.y : raw.w;
    return make_uint4(pair(w0, 0x4140u), pair(w0, 0x4342u), pair(w1, 0x4140u), pair(w1, 0x4342u));
  }
  __device__ static __forceinline__ uint4 exact_block(const uint4& raw, int b) { return block(raw, b); }
  __device__ static __forceinline__ Scales load_scales(const unsigned short* row, int step) {
    return __ldg(reinterpret_cast<const unsigned*>(row + step * 2));
  }
  __device__ static __forceinline__ void group_scales(Scales s, int /*step*/, BlockScale (&out)[2]) {
    out[0] = {half_bits_to_float(static_cast<unsigned short>(s & 0xFFFFu)), 0.0f};
    out[1] = {half_bits_to_float(static_cast<unsigned short>(s >> 16)), 0.0f};
  }
};

template <>
struct QuantValues<MatrixFormat::q4_0> : WholeBlocks, Fp16GroupOf4Scales<MatrixFormat::q4_0> {
  // Nibble pair p of a word (weight_matrix.hpp's bit layout) as exact bf16: (128 + n) - 136.
  __device__ static __forceinline__ unsigned pair(unsigned w, int p) {
    return bf16x2_sub(masked_or(w >> (4 * p), 0x000F000Fu, 0x43004300u), 0x43084308u);
  }
  __device__ static __forceinline__ uint4 block(const uint4& raw, int b) {
    const unsigned w = b == 0 ? raw.x : b == 1 ? raw.y : b == 2 ? raw.z : raw.w;
    return make_uint4(pair(w, 0), pair(w, 1), pair(w, 2), pair(w, 3));
  }
  __device__ static __forceinline__ uint4 exact_block(const uint4& raw, int b) { return block(raw, b); }
};

// The (fp16 d, fp16 m) pairs of Q4_1 / Q5_1, a min per block: value = quant · d + m, so
// BlockScale's m is -m.
template <MatrixFormat F>
struct Fp16PairScales {
  static constexpr bool kHasMin = true;
  using Scales = uint4;  // the group's 4 (fp16 d | fp16 m << 16) of a row
  __device__ static __forceinline__ const uint4* row(const unsigned char* matrix, long long n, long long k, long long r) {
    return reinterpret_cast<const uint4*>(matrix + quant_after_high_offset(F, n, k)) + r * quant_row_groups(F, k);
  }
  __device__ static __forceinline__ Scales load_scales(const uint4* row, int step) { return __ldg(row + step); }
  __device__ static __forceinline__ void group_scales(const Scales& s, int /*step*/, BlockScale (&out)[4]) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const unsigned w = b == 0 ? s.x : b == 1 ? s.y : b == 2 ? s.z : s.w;
      out[b] = {half_bits_to_float(static_cast<unsigned short>(w & 0xFFFFu)),
                -half_bits_to_float(static_cast<unsigned short>(w >> 16))};
    }
  }
};

// Q4_1: Q4_0's nibbles as 128 + n.
template <>
struct QuantValues<MatrixFormat::q4_1> : WholeBlocks, Offset128Nibbles, Fp16PairScales<MatrixFormat::q4_1> {};

// Q5_0: its quants as the exact bf16 values u - 16, (128 + u) - 144, no min; Q4_0's fp16 scales
// after the fifth bits (Fp16GroupOf4Scales).
template <>
struct QuantValues<MatrixFormat::q5_0> : FifthBits<MatrixFormat::q5_0>, Fp16GroupOf4Scales<MatrixFormat::q5_0> {
  __device__ static __forceinline__ uint4 block(const uint4& raw, High h, int b) {
    return Offset128Nibbles::minus(FifthBits::block(raw, h, b), 0x43104310u);
  }
  __device__ static __forceinline__ uint4 exact_block(const uint4& raw, High h, int b) { return block(raw, h, b); }
};

// Q5_1: Q4_1's pairs of scales.
template <>
struct QuantValues<MatrixFormat::q5_1> : FifthBits<MatrixFormat::q5_1>, Fp16PairScales<MatrixFormat::q5_1> {};

// The 16-byte super-block headers of Q4_K / Q5_K: a scale and a min per 32-value sub-block (a
// block), under the super-block's d and dmin. With quants as 128 + n (Offset128), the block's
// offset takes 128·d·sc·Σx off with the min (group_scales' m).
template <MatrixFormat F>
struct SuperBlockHeaderScales {
  static constexpr bool kHasMin = true;
  using Scales = uint4;  // the super-block's header: fp16 d | fp16 dmin << 16, then 12 bytes of scales
  __device__ static __forceinline__ const uint4* row(const unsigned char* matrix, long long n, long long k, long long r) {
    return reinterpret_cast<const uint4*>(matrix + quant_after_high_offset(F, n, k)) + r * (k / kQ4kSuperValues);
  }
  __device__ static __forceinline__ Scales load_scales(const uint4* row, int step) { return __ldg(row + step / 2); }
  // Group `step` holds sub-blocks 4h..4h+3 of its super-block (h = step % 2); ggml's get_scale_min_k4
  // on four bytes at once: sub-block j < 4 has scale bytes[j] & 63 and min bytes[j + 4] & 63, j >= 4
  // the low / high nibble of bytes[j + 4] with the top two bits of bytes[j - 4] / bytes[j] above.
  __device__ static __forceinline__ void group_scales(const Scales& h, int step, BlockScale (&out)[4]) {
    const bool high = step % 2 != 0;
    const unsigned sc = high ? (h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u) : h.y & 0x3F3F3F3Fu;
    const unsigned m = high ? ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u) : h.z & 0x3F3F3F3Fu;
    const float d = half_bits_to_float(static_cast<unsigned short>(h.x & 0xFFFFu));
    const float dmin = half_bits_to_float(static_cast<unsigned short>(h.x >> 16));
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      out[b] = {__fmul_rn(d, byte_as_float(sc, b)), __fmul_rn(dmin, byte_as_float(m, b))};
    }
  }
};

template <>
struct QuantValues<MatrixFormat::q4_k> : WholeBlocks, Offset128Nibbles, SuperBlockHeaderScales<MatrixFormat::q4_k> {};

// Q5_K: Q4_K's headers.
template <>
struct QuantValues<MatrixFormat::q5_k> : FifthBits<MatrixFormat::q5_k>, SuperBlockHeaderScales<MatrixFormat::q5_k> {};

// The high bits of Q6_K's and Q3_K's quants (a second area, weight_matrix.hpp): 8 bytes a lane
// of a group.
template <MatrixFormat F>
struct EightHighBytes {
  static constexpr bool kHighBits = true;
  using High = uint2;  // a lane's high bits of its group: Q6_K's 16 bits a block, Q3_K's 8
  static constexpr int kHighGroupBytes = kQ6kHighGroupBytes;
  // Lane q's high bits of row r's groups.
  __device__ static __forceinline__ const unsigned char* high_row(const unsigned char* matrix, long long n, long long k,
                                                                  long long r, int q) {
    return high_bits_row<F, kHighGroupBytes>(matrix, n, k, r, q);
  }
  __device__ static __forceinline__ High load_high(const unsigned char* p) { return load_streaming_8(p); }
};

template <>
struct QuantValues<MatrixFormat::q6_k> : EightHighBytes<MatrixFormat::q6_k> {
  static constexpr bool kHasMin = false;
  static constexpr bool kHalfScales = true;  // a scale per 16 columns: one per k16 mma of a block
  struct Scales {
    uint2 sc;          // the group's 8 int8 sub-block scales (its super-block's half)
    unsigned short d;  // the super-block's fp16 d
  };
  struct Row {
    const uint2* sc;
    const unsigned short* d;
  };
  __device__ static __forceinline__ Row row(const unsigned char* matrix, long long n, long long k, long long r) {
    const long long supers = k / kQ4kSuperValues;
    return {reinterpret_cast<const uint2*>(matrix + quant_after_high_offset(MatrixFormat::q6_k, n, k)) + r * supers * 2,
            reinterpret_cast<const unsigned short*>(matrix + q6k_d_offset(n, k)) + r * supers};
  }
  __device__ static __forceinline__ Scales load_scales(const Row& row, int step) {
    return {__ldg(row.sc + step), __ldg(row.d + step / 2)};
  }
  // Nibble pair p of a block's low word w with the pair's high bits from h (block b: e = b % 2;
  // weight_matrix.hpp's layout puts them at bits 8e + 2p and 16 + 8e + 2p) as the exact bf16
  // values u - 32: (128 + u) - 160.
  template <int p, int e>
  __device__ static __forceinline__ unsigned pair(unsigned w, unsigned h) {
    const unsigned high = bits_to<8 * e + 2 * p, 4>(h);  // the high bits to bits 4-5 of each half
    return bf16x2_sub(masked_or(high, 0x00300030u, masked_or(w >> (4 * p), 0x000F000Fu, 0x43004300u)), 0x43204320u);
  }
  template <int e>
  __device__ static __forceinline__ uint4 pairs(unsigned w, unsigned h) {
    return make_uint4(pair<0, e>(w, h), pair<1, e>(w, h), pair<2, e>(w, h), pair<3, e>(w, h));
  }
  __device__ static __forceinline__ uint4 block(const uint4& raw, const High& high, int b) {
    const unsigned w = b == 0 ? raw.x : b == 1 ? raw.y : b == 2 ? raw.z : raw.w;
    const unsigned h = b < 2 ? high.x : high.y;
    return b % 2 == 0 ? pairs<0>(w, h) : pairs<1>(w, h);
  }
  __device__ static __forceinline__ uint4 exact_block(const uint4& raw, const High& high, int b) {
    return block(raw, high, b);
  }
  // The group's 8 sub-block scales d · sc (ggml's dequantize_row_q6_K multiplies d by sc first):
  // block b's columns 0..15 take out[2b], 16..31 out[2b + 1]. (Each byte as 2^23 + 128 + sc less
  // 2^23 + 128, Q4_K's way around the integer-to-float conversion, was slower: H200, the 8B LM
  // head 145.1 -> 152.1 µs, qkv 10.4 -> 10.8.)
  __device__ static __forceinline__ void group_scales(const Scales& s, int /*step*/, BlockScale (&out)[8]) {
    const float d = half_bits_to_float(s.d);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const unsigned w = i < 4 ? s.sc.x : s.sc.y;
      const int sc = static_cast<int>(w << (24 - 8 * (i % 4))) >> 24;  // the signed byte
      out[i] = {__fmul_rn(d, static_cast<float>(sc)), 0.0f};
    }
  }
};

// The 2-bit quants of Q2_K and Q3_K (weight_matrix.hpp): a lane's 16 group bytes hold 16 bits of
// each of the group's 8 blocks (Q6_K's lane columns: a scale per 16 columns, one per k16 mma),
// block b's pair p at bits 8 (b % 2) + 2p and 16 + 8 (b % 2) + 2p of word b / 2.
struct TwoBitQuants {
  static constexpr bool kHalfScales = true;
  // Pair p of block e of a word as the bf16 values 128 + u.
  template <int p, int e>
  __device__ static __forceinline__ unsigned pair(unsigned w) {
    return masked_or(w >> (8 * e + 2 * p), 0x00030003u, 0x43004300u);
  }
  template <int e>
  __device__ static __forceinline__ uint4 pairs(unsigned w) {
    return make_uint4(pair<0, e>(w), pair<1, e>(w), pair<2, e>(w), pair<3, e>(w));
  }
  __device__ static __forceinline__ unsigned word(const uint4& raw, int b) {
    return b < 2 ? raw.x : b < 4 ? raw.y : b < 6 ? raw.z : raw.w;
  }
};

// Q2_K: value = d·sc · u - dmin·m, a 4-bit scale and min per 16 columns; the quants enter the mma as
// 128 + u (Offset128), and each half block's offset goes with its own Σx.
template <>
struct QuantValues<MatrixFormat::q2_k> : TwoBitQuants, Offset128 {
  static constexpr bool kHasMin = true;
  static constexpr bool kHighBits = false;
  struct High {};
  struct Scales {
    uint4 sc;     // the super-block's 16 bytes sc | m << 4, in column order
    unsigned dm;  // fp16 d | fp16 dmin << 16
  };
  struct Row {
    const uint4* sc;
    const unsigned* dm;
  };
  __device__ static __forceinline__ Row row(const unsigned char* matrix, long long n, long long k, long long r) {
    const long long supers = k / kQ4kSuperValues;
    return {reinterpret_cast<const uint4*>(matrix + quant_after_high_offset(MatrixFormat::q2_k, n, k)) + r * supers,
            reinterpret_cast<const unsigned*>(matrix + q2k_d_offset(n, k)) + r * supers};
  }
  __device__ static __forceinline__ Scales load_scales(const Row& row, int step) {
    return {__ldg(row.sc + step), __ldg(row.dm + step)};
  }
  // Block b's two sub-block scales d·sc and mins dmin·m (ggml's dequantize_row_q2_K's dl and ml):
  // its columns 0..15 take out[2b], 16..31 out[2b + 1].
  __device__ static __forceinline__ void block_scales(const Scales& s, int b, BlockScale (&out)[16]) {
    const float d = half_bits_to_float(static_cast<unsigned short>(s.dm & 0xFFFFu));
    const float dmin = half_bits_to_float(static_cast<unsigned short>(s.dm >> 16));
    const unsigned w = b < 2 ? s.sc.x : b < 4 ? s.sc.y : b < 6 ? s.sc.z : s.sc.w;
#pragma unroll
    for (int i = 2 * b; i < 2 * b + 2; ++i) {
      out[i] = {__fmul_rn(d, byte_as_float(w & 0x0F0F0F0Fu, i % 4)),
                __fmul_rn(dmin, byte_as_float((w >> 4) & 0x0F0F0F0Fu, i % 4))};
    }
  }
  __device__ static __forceinline__ void group_scales(const Scales& s, int /*step*/, BlockScale (&out)[16]) {
#pragma unroll
    for (int b = 0; b < 8; ++b) block_scales(s, b, out);
  }
  __device__ static __forceinline__ uint4 block(const uint4& raw, int b) {
    return b % 2 == 0 ? pairs<0>(word(raw, b)) : pairs<1>(word(raw, b));
  }
  __device__ static __forceinline__ uint4 exact_block(const uint4& raw, int b) {
    return Offset128Nibbles::minus(block(raw, b), 0x43004300u);
  }
};

// Q3_K: value = d·(sc - 32) · (u - 4), u = the 2-bit quant | its third bit << 2, a 6-bit scale per
// 16 columns; the quants enter the mma as the exact bf16 values u - 4, (128 + u) - 132.
template <>
struct QuantValues<MatrixFormat::q3_k> : TwoBitQuants, EightHighBytes<MatrixFormat::q3_k> {
  static constexpr bool kHasMin = false;
  struct Scales {
    uint2 low;      // the super-block's 16 scales' low 4 bits (ggml's scales bytes 0..7)
    unsigned high;  // their high 2 bits (bytes 8..11)
    unsigned short d;
  };
  struct Row {
    const uint2* low;
    const unsigned* high;
    const unsigned short* d;
  };
  __device__ static __forceinline__ Row row(const unsigned char* matrix, long long n, long long k, long long r) {
    const long long supers = k / kQ4kSuperValues;
    return {reinterpret_cast<const uint2*>(matrix + quant_after_high_offset(MatrixFormat::q3_k, n, k)) + r * supers,
            reinterpret_cast<const unsigned*>(matrix + q3k_scale_high_offset(n, k)) + r * supers,
            reinterpret_cast<const unsigned short*>(matrix + q3k_d_offset(n, k)) + r * supers};
  }
  __device__ static __forceinline__ Scales load_scales(const Row& row, int step) {
    return {__ldg(row.low + step), __ldg(row.high + step), __ldg(row.d + step)};
  }
  // Pair p of block b with the pair's third bits from h (bits 4 (b % 4) + p and 16 higher) as u - 4.
  template <int p, int b>
  __device__ static __forceinline__ unsigned pair(unsigned w, unsigned h) {
    const unsigned third = bits_to<4 * (b % 4) + p, 2>(h);  // the third bits to bit 2 of each half
    return bf16x2_sub(masked_or(third, 0x00040004u, TwoBitQuants::pair<p, b % 2>(w)), 0x43044304u);
  }
  template <int b>
  __device__ static __forceinline__ uint4 pairs(const uint4& raw, const High& high) {
    const unsigned w = word(raw, b), h = b < 4 ? high.x : high.y;
    return make_uint4(pair<0, b>(w, h), pair<1, b>(w, h), pair<2, b>(w, h), pair<3, b>(w, h));
  }
  __device__ static __forceinline__ uint4 block(const uint4& raw, const High& high, int b) {
    switch (b) {
      case 0: return pairs<0>(raw, high);
      case 1: return pairs<1>(raw, high);
      case 2: return pairs<2>(raw, high);
      case 3: return pairs<3>(raw, high);
      case 4: return pairs<4>(raw, high);
      case 5: return pairs<5>(raw, high);
      case 6: return pairs<6>(raw, high);
      default: return pairs<7>(raw, high);
    }
  }
  __device__ static __forceinline__ uint4 exact_block(const uint4& raw, const High& high, int b) {
    return block(raw, high, b);
  }
  // Block b's two sub-block scales d · (sc - 32) (ggml's dequantize_row_q3_K's dl), out[2b] and
  // out[2b + 1]: sub-block i's sc has the low (i < 8) or high (i >= 8) nibble of low's byte i % 8
  // for its low 4 bits, bits 2 (i / 4) of high's byte i % 4 for its top 2 (ggml's packing), so
  // that sub-blocks 4j..4j+3 are the bytes of word j below.
  __device__ static __forceinline__ void block_scales(const Scales& s, int b, BlockScale (&out)[16]) {
    const float d = half_bits_to_float(s.d);
    const int j = b / 2;
    const unsigned low = j % 2 == 0 ? s.low.x : s.low.y;
    const unsigned high = j < 2 ? s.high << (4 - 2 * j) : s.high >> (2 * j - 4);  // bits 2j, 2j + 1 to 4, 5
    const unsigned sc = ((j < 2 ? low : low >> 4) & 0x0F0F0F0Fu) | (high & 0x30303030u);
#pragma unroll
    for (int i = 2 * b; i < 2 * b + 2; ++i) out[i] = {__fmul_rn(d, byte_as_float(sc, i % 4) - 32.0f), 0.0f};
  }
  __device__ static __forceinline__ void group_scales(const Scales& s, int /*step*/, BlockScale (&out)[16]) {
#pragma unroll
    for (int b = 0; b < 8; ++b) block_scales(s, b, out);
  }
};

template <>
struct QuantValues<MatrixFormat::fp8> : WholeBlocks {
  static constexpr bool kHasMin = false;
  using Scales = float;  // the scale of the group's 128 × 128 block (both its "blocks" of 32)
  // Rows stay as they are (weight_matrix.hpp): lane q holds columns 16q..16q+15 of the group.
  __device__ static __forceinline__ int lane_column(int b, int q) { return q * 16 + b * 8; }
  // Row r's scales: those of its block of 128 rows.
  __device__ static __forceinline__ const float* row(const unsigned char* matrix, long long n, long long k, long long r) {
    return reinterpret_cast<const float*>(matrix + quant_scales_offset(MatrixFormat::fp8, n, k)) +
           r / kFp8BlockRows * fp8_scale_cols(k);
  }
  // A group is 64 columns: half a 128-column block.
  __device__ static __forceinline__ Scales load_scales(const float* row, int step) { return __ldg(row + step / 2); }
  __device__ static __forceinline__ void group_scales(Scales s, int /*step*/, BlockScale (&out)[2]) {
    out[0] = out[1] = {s, 0.0f};
  }
  // Codes `bytes` of w (bytes 0, 1 or 2, 3) as the exact bf16 values. E4M3 is sign, 4 exponent bits
  // (bias 7) and 3 mantissa bits; bf16 the same with 8 exponent bits (bias 127) and 7: the code's
  // 7 magnitude bits shifted up by 4 under the sign are the bf16 of value · 2^-120, exactly, zero
  // and E4M3's subnormals (exponent 0) included as bf16 subnormals, which bf16 arithmetic keeps
  // (PTX: no flush for .bf16); one multiply by 2^120 makes them the values. The byte permute
  // copies the sign bit over the byte above each code (prmt's sign-replicating selector 8 + byte).
  template <int kHigh>
  __device__ static __forceinline__ unsigned pair(unsigned w) {
    unsigned t;
    asm("prmt.b32 %0, %1, 0, %2;" : "=r"(t) : "r"(w), "n"(kHigh ? 0xB3A2 : 0x9180));
    const unsigned scaled = (t << 4) & 0x87F087F0u;  // sign to bit 15, magnitude to bits 4..10
    const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&scaled),
                                     __floats2bfloat162_rn(0x1p120f, 0x1p120f));
    return *reinterpret_cast<const unsigned*>(&r);
  }
  __device__ static __forceinline__ uint4 block(const uint4& raw, int b) {
    const unsigned w0 = b == 0 ? raw.x : raw.z, w1 = b == 0 ? raw.y : raw.w;
    return make_uint4(pair<0>(w0), pair<1>(w0), pair<0>(w1), pair<1>(w1));
  }
  __device__ static __forceinline__ uint4 exact_block(const uint4& raw, int b) { return block(raw, b); }
};

// A format's block b of a lane's group bytes (and, the 5- and 6-bit formats, high bits) as 8 bf16
// values in pairs: as the GEMV's mma takes them, or (kExact) as the exact quants (those with a min
// differ: 128 + n in the mma; Q5_0's are u - 16 and Q6_K's u - 32 either way).
template <typename Q, bool kExact = false>
__device__ __forceinline__ uint4 block_values(const uint4& raw, const typename Q::High& high, int b) {
  if constexpr (Q::kHighBits) {
    if constexpr (kExact) return Q::exact_block(raw, high, b);
    return Q::block(raw, high, b);
  } else if constexpr (kExact) {
    return Q::exact_block(raw, b);
  } else {
    return Q::block(raw, b);
  }
}

// A format or a choice as a type, for the launchers' generic lambdas (no <type_traits> under NVRTC).
template <MatrixFormat F>
struct FormatConstant {
  static constexpr MatrixFormat value = F;
};
template <bool B>
struct BoolConstant {
  static constexpr bool value = B;
};

// fn(FormatConstant<F>{}) for the block format f, and true, where rows of kK values are whole
// blocks of it (32 values; the K-quants: 256-value super-blocks); false for any other (bf16
// rows; the CPU's formats, which the GPU's loader never keeps) and for rows it does not cut whole,
// so that no kernel is instantiated for them. kK = 0: rows of any length, which the caller checks.
// kParts: a part of a matrix in two formats, which are GGUF block formats only (FP8 matrices are
// FP8 throughout), so that no FP8 part kernel is instantiated.
template <int kK, bool kParts = false, typename Fn>
bool with_block_format(MatrixFormat f, Fn&& fn) {
  if constexpr (kK % kQuantBlockValues == 0) {
    const auto whole = [&](auto format, auto allowed) {
      if constexpr (decltype(allowed)::value) fn(format);
      return decltype(allowed)::value;
    };
    constexpr bool kSupers = kK % kQ4kSuperValues == 0;
    switch (f) {
      case MatrixFormat::q8_0: return whole(FormatConstant<MatrixFormat::q8_0>{}, BoolConstant<true>{});
      case MatrixFormat::q4_0: return whole(FormatConstant<MatrixFormat::q4_0>{}, BoolConstant<true>{});
      case MatrixFormat::q4_1: return whole(FormatConstant<MatrixFormat::q4_1>{}, BoolConstant<true>{});
      case MatrixFormat::q5_0: return whole(FormatConstant<MatrixFormat::q5_0>{}, BoolConstant<true>{});
      case MatrixFormat::q5_1: return whole(FormatConstant<MatrixFormat::q5_1>{}, BoolConstant<true>{});
      case MatrixFormat::fp8: return whole(FormatConstant<MatrixFormat::fp8>{}, BoolConstant<!kParts>{});
      case MatrixFormat::q4_k: return whole(FormatConstant<MatrixFormat::q4_k>{}, BoolConstant<kSupers>{});
      case MatrixFormat::q5_k: return whole(FormatConstant<MatrixFormat::q5_k>{}, BoolConstant<kSupers>{});
      case MatrixFormat::q6_k: return whole(FormatConstant<MatrixFormat::q6_k>{}, BoolConstant<kSupers>{});
      case MatrixFormat::q2_k: return whole(FormatConstant<MatrixFormat::q2_k>{}, BoolConstant<kSupers>{});
      case MatrixFormat::q3_k: return whole(FormatConstant<MatrixFormat::q3_k>{}, BoolConstant<kSupers>{});
      default: return false;
    }
  }
  return false;
}

// The values of lane chunk (row r, group s, lane q) of a quantized [n, k] matrix in format F:
// for each block b of the group inside k, the lane's columns of it (lane_column) as quant · d - m in two
// roundings, as ggml's dequantize_row_* (not one fma). `store(col, v)` takes each run of
// consecutive columns from col: v a float[8] (the 8 from lane_column: 8q..8q+7 of the block, FP8's
// 16q + 8b..), or Q6_K's float[4] twice (4q..4q+3 and 16+4q..16+4q+3).
template <MatrixFormat F, typename Store>
__device__ __forceinline__ void decode_chunk(const unsigned char* __restrict__ matrix, long long n, long long k,
                                             long long r, long long s, int q, Store store) {
  using Q = QuantValues<F>;
  constexpr int G = quant_group_blocks(F);
  constexpr int kScalesPerBlock = Q::kHalfScales ? 2 : 1;
  const long long groups = quant_row_groups(F, k);
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(matrix + (r * groups + s) * kQuantGroupBytes + q * 16));
  typename Q::High high{};
  if constexpr (Q::kHighBits) {
    high = __ldg(reinterpret_cast<const typename Q::High*>(Q::high_row(matrix, n, k, r, q) + s * Q::kHighGroupBytes));
  }
  const typename Q::Scales d = Q::load_scales(Q::row(matrix, n, k, r), static_cast<int>(s));
  BlockScale scales[G * kScalesPerBlock];
  Q::group_scales(d, static_cast<int>(s), scales);
#pragma unroll
  for (int b = 0; b < G; ++b) {
    long long col;  // the first column of block b the lane holds (Q6_K: the block's first)
    if constexpr (Q::kHalfScales) {
      col = (s * G + b) * 32;
    } else {
      col = s * G * 32 + Q::lane_column(b, q);
    }
    if (col >= k) continue;  // padding
    const uint4 v = block_values<Q, true>(raw, high, b);
    const unsigned pairs[4] = {v.x, v.y, v.z, v.w};
    float values[8];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const BlockScale scale = scales[b * kScalesPerBlock + (Q::kHalfScales ? p / 2 : 0)];
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pairs[p]));
      values[2 * p] = __fsub_rn(__fmul_rn(f.x, scale.d), scale.m);
      values[2 * p + 1] = __fsub_rn(__fmul_rn(f.y, scale.d), scale.m);
    }
    if constexpr (Q::kHalfScales) {
      const float lo[4] = {values[0], values[1], values[2], values[3]};
      const float hi[4] = {values[4], values[5], values[6], values[7]};
      store(col + 4 * q, lo);
      store(col + 16 + 4 * q, hi);
    } else {
      store(col, values);
    }
  }
}

}  // namespace detail

}  // namespace kiln
