// The body of the dot-product kernels (quant_dot.hpp), compiled once per instruction set: each
// quant_dot_<isa>.cpp defines KILN_DOT_SIMD (0 portable, 1 AVX2, 2 AVX-512 VNNI) and KILN_DOT_NS
// and includes this inside nothing but its own namespace. No std templates here: an inline std
// function instantiated in the AVX-512 file could be the copy the linker keeps for every caller.
//
// Block formats: a tile is one group of 16 rows (templates/weight_matrix.hpp) × C tokens, a 32-bit
// lane per row: each weight block is loaded (and its nibbles unpacked) once for C tokens, and
// each 4 activations are broadcast to the 16 rows; the C vectors of sums stay in registers and are
// the output rows as they are (no sum across lanes). bf16 rows: a tile is R rows × C tokens of
// sums across lanes.
#pragma once

#include <cstring>

#include "runtime/cpu/quant_dot.hpp"
#include "runtime/cpu/token_tiles.hpp"

#if KILN_DOT_SIMD
#include <immintrin.h>
#endif

namespace kiln::cpu::KILN_DOT_NS {

#if KILN_DOT_SIMD == 2
constexpr int kBlockTokens = 8;              // 8 sums + 8 weight vectors in 32 registers
constexpr int kBf16Rows = 2, kBf16Tokens = 6;  // 12 sums: the best of 1-4 rows × 2-8 tokens measured
#else
constexpr int kBlockTokens = 4;  // AVX2's 16 registers (and the portable loop)
constexpr int kBf16Rows = 2, kBf16Tokens = 6;  // 12 sums, 2 weight vectors, 1 of activations
constexpr int kBf16DecodeRows = 8;             // one token: 8 sums (run_bf16)
#endif

// The offset of the unsigned quants (value = scale · (u - offset)), folded into the integer sum
// as -offset · total (quant_dot.hpp).
template <MatrixFormat F>
constexpr int kQuantOffset = F == MatrixFormat::q8_0   ? 128
                             : F == MatrixFormat::q4_0 ? 8
                             : F == MatrixFormat::q5_0 ? 16
                             : F == MatrixFormat::q6_k ? 32
                             : F == MatrixFormat::q3_k ? 4
                                                       : 0;

// Q2_K, Q3_K and Q6_K have a scale per 16 values: a block's products are summed per half (columns
// 0..15 and 16..31), each with its offset's share of the activations' total (quant_dot.hpp), and
// Q2_K's min times the half's Σx.
template <MatrixFormat F>
constexpr bool kHalfScales = has_half_block_scales(F);

// The formats whose unsigned quants are 4-bit (u ≤ 15).
template <MatrixFormat F>
constexpr bool kNibbleQuants = F == MatrixFormat::q4_0 || F == MatrixFormat::q4_1 || F == MatrixFormat::q4_k;

inline int32_t four_at(const int8_t* p) {  // 4 activations as one 32-bit lane
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Block b's record in a group's bytes w, and its K-quant header (weight_matrix.hpp).
template <MatrixFormat F>
inline const std::byte* record(const std::byte* w, int64_t b) { return w + cpu_record_at(F, b); }
template <MatrixFormat F>
inline const std::byte* header(const std::byte* w, int64_t b) { return w + cpu_header_at(F, b); }

// The bytes prefetch_ahead asks for a block: its record, and its share of a header.
template <MatrixFormat F>
constexpr int64_t kBlockStream = cpu_block_bytes(F) + cpu_header_bytes(F);

#if KILN_DOT_SIMD
// A group's block records are read once, in order, and the next group's follow them: each block
// asks for the record kPrefetchBytes ahead. The hardware prefetcher alone left a core that streams
// weights from memory waiting on them (one core of an AMD EPYC with AVX-512, Q4_0 rows of 2,048
// past the L3: 8 tokens a tile 93 -> 193 G products/s, one token 60 -> 90; 4 KB ahead 193 / 66,
// 8 KB 194 / 81; AVX2's 8-token tiles 39 -> 62). Llama-3.2-1B Q4_0 on 2 cores, medians of 3 runs
// alternating: 32-token prompts 238 -> 300 tokens/s, 512-token 275 -> 287, decode 46 -> 49.
// Prefetches never fault, so reading ahead past the matrix is harmless.
constexpr int64_t kPrefetchBytes = 16384;
template <int64_t kBytes>
inline void prefetch_ahead(const std::byte* p) {
  for (int64_t line = 0; line < kBytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + line), _MM_HINT_T0);
}
#endif

#if KILN_DOT_SIMD == 2

// The 16 rows' unsigned quants of a block record: lane r of u[j] is row r's columns 4j..4j+3.
template <MatrixFormat F>
inline void unpack(const std::byte* rec, __m512i u[8]) {
  if constexpr (F == MatrixFormat::q8_0) {
    for (int j = 0; j < 8; ++j) u[j] = _mm512_loadu_si512(rec + 64 * j);
  } else {
    if constexpr (has_two_bit_quants(F)) {  // u[4v + s]: bits 2s of vector v
      const __m512i mask = _mm512_set1_epi8(0x03);
      for (int v = 0; v < 2; ++v) {
        const __m512i p = _mm512_loadu_si512(rec + 64 * v);
        for (int s = 0; s < 4; ++s) u[4 * v + s] = _mm512_and_si512(_mm512_srli_epi16(p, 2 * s), mask);
      }
    } else {
      const __m512i mask = _mm512_set1_epi8(0x0F);
      for (int j = 0; j < 4; ++j) {
        const __m512i p = _mm512_loadu_si512(rec + 64 * j);
        u[j] = _mm512_and_si512(p, mask);
        u[j + 4] = _mm512_and_si512(_mm512_srli_epi16(p, 4), mask);
      }
    }
    // Q5_0: bit j of each byte is u[j]'s 16: moved to bit 4, or-ed in; Q6_K: so is a second
    // plane's, to bit 5 (its 32); Q3_K's one plane to bit 2 (its 4).
    constexpr int kLow = cpu_low_bits(F);
    for (int plane = 0; plane < cpu_high_bit_planes(F); ++plane) {
      const __m512i bits = _mm512_loadu_si512(rec + cpu_quant_bytes(F) + 64 * plane);
      const __m512i to = _mm512_set1_epi8(static_cast<char>(1 << (kLow + plane)));
      for (int j = 0; j < 8; ++j) {
        const int shift = kLow + plane - j;
        const __m512i moved = shift >= 0 ? _mm512_slli_epi16(bits, shift) : _mm512_srli_epi16(bits, -shift);
        u[j] = _mm512_ternarylogic_epi32(u[j], moved, to, 0xF8);  // u | (moved & to)
      }
    }
  }
}

// The 16 rows' fp16 values at p, and their int8 values, as fp32.
inline __m512 f16_rows(const std::byte* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 i8_rows(const std::byte* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// The 16 rows' scales of a block record (of columns 16·half.. where a scale is per 16), and their
// mins: fp16 in the record, or the K-quants' d·sc and (-dmin)·m (the header's times the record's
// sub-block values, ggml's products).
template <MatrixFormat F>
inline __m512 block_scales(const std::byte* rec, const std::byte* hdr, int half = 0) {
  if constexpr (!is_k_quant(F)) return f16_rows(rec + cpu_scales_at(F));
  return _mm512_mul_ps(f16_rows(hdr), i8_rows(rec + cpu_scales_at(F) + kCpuRowGroup * half));
}
template <MatrixFormat F>
inline __m512 block_mins(const std::byte* rec, const std::byte* hdr, int half = 0) {
  if constexpr (!is_k_quant(F)) return f16_rows(rec + cpu_mins_at(F));
  return _mm512_mul_ps(f16_rows(hdr + 2 * kCpuRowGroup), i8_rows(rec + cpu_mins_at(F) + kCpuRowGroup * half));
}

// A block's integer sums for one token, Σ (u - offset)·(128·q + lo) over the block (sum[0]) or over
// each half (sum[0], sum[1]: kHalfScales), into its fp32 sums acc: converted, times scale · step, and
// min · Σx; per half, each converted sum times its scale, added, then times step, and each half's
// min times its Σx. The AMX kernel (quant_amx.cpp) takes its integer sums through this too: its
// outputs are this kernel's bits.
template <MatrixFormat F>
inline __m512 add_block(__m512 acc, const __m512i* sum, const __m512* scale, const __m512* min, const Q8Block& xb) {
  if constexpr (kHalfScales<F>) {
    __m512 v = _mm512_setzero_ps();
    for (int h = 0; h < 2; ++h) v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[h]), scale[h], v);
    acc = _mm512_fmadd_ps(v, _mm512_set1_ps(xb.step), acc);
    if constexpr (cpu_has_min(F)) {
      const int32_t totals[2] = {xb.total_first, xb.total - xb.total_first};
      for (int h = 0; h < 2; ++h) acc = _mm512_fmadd_ps(min[h], _mm512_set1_ps(xb.step * static_cast<float>(totals[h])), acc);
    }
    return acc;
  }
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[0]), _mm512_mul_ps(scale[0], _mm512_set1_ps(xb.step)), acc);
  if constexpr (cpu_has_min(F)) acc = _mm512_fmadd_ps(min[0], _mm512_set1_ps(xb.sum), acc);
  return acc;
}

// The loops over the C tokens are unrolled (GCC's pragma) so that their sums stay in registers; a
// loop that is not keeps them in memory, loaded and stored per block (Llama-3.2-1B Q4_0 on 2 cores
// of an AMD EPYC with AVX-512, runs alternating: 160-203 -> 231-237 tokens/s at 32, 243 -> 256-271
// at 512).
template <MatrixFormat F, int C>
void tile_blocks(const DotArgs& a, int64_t g, int64_t t0) {
  const int64_t blocks = a.k / kQuantBlockValues;
  const std::byte* w = a.w + g * a.stride;
  const Q8Block* x = static_cast<const Q8Block*>(a.x) + t0 * a.act_stride;
  __m512 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const std::byte *rec = record<F>(w, b), *hdr = header<F>(w, b);
    prefetch_ahead<kBlockStream<F>>(rec);
    __m512i u[8];
    unpack<F>(rec, u);
    constexpr int kHalves = kHalfScales<F> ? 2 : 1;
    __m512 scale[kHalves], min[kHalves];
    for (int h = 0; h < kHalves; ++h) {
      scale[h] = block_scales<F>(rec, hdr, h);
      min[h] = _mm512_setzero_ps();
      if constexpr (cpu_has_min(F)) min[h] = block_mins<F>(rec, hdr, h);
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const Q8Block& xb = x[c * a.act_stride + b];
      const int32_t totals[2] = {kHalves == 2 ? xb.total_first : xb.total, xb.total - xb.total_first};
      __m512i sum[kHalves];
      for (int h = 0; h < kHalves; ++h) {  // the block's (or half's) quant vectors
        __m512i hi = _mm512_setzero_si512(), lo = _mm512_set1_epi32(-kQuantOffset<F> * totals[h]);
        for (int j = h * 8 / kHalves; j < (h + 1) * 8 / kHalves; ++j) {
          hi = _mm512_dpbusd_epi32(hi, u[j], _mm512_set1_epi32(four_at(xb.q + 4 * j)));
          lo = _mm512_dpbusd_epi32(lo, u[j], _mm512_set1_epi32(four_at(xb.lo + 4 * j)));
        }
        sum[h] = _mm512_add_epi32(_mm512_slli_epi32(hi, 7), lo);
      }
      acc[c] = add_block<F>(acc[c], sum, scale, min, xb);
    }
  }
  const int64_t rows = a.rows - g * kCpuRowGroup;
  const __mmask16 valid = rows >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << rows) - 1);
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    float* o = a.out + (t0 + c) * a.out_stride + g * kCpuRowGroup;
    __m512 v = acc[c];
    if (a.accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(valid, o));
    _mm512_mask_storeu_ps(o, valid, v);
  }
}

#elif KILN_DOT_SIMD == 1

// A group's rows 8·h .. 8·h + 7 (the h-th 32-byte half of each record vector) at a time: their
// unsigned quants; Q8_0's as |w| with w's signs kept for the activations (u - 128 is w: the
// offset then needs no correction, and maddubs cannot saturate on 0..255).
template <MatrixFormat F>
inline void unpack(const std::byte* rec, int h, __m256i u[8], __m256i signs[8]) {
  const auto at = [&](int64_t offset) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + offset + 32 * h)); };
  if constexpr (F == MatrixFormat::q8_0) {
    for (int j = 0; j < 8; ++j) {
      signs[j] = _mm256_xor_si256(at(64 * j), _mm256_set1_epi8(static_cast<char>(0x80)));
      u[j] = _mm256_sign_epi8(signs[j], signs[j]);
    }
  } else {
    if constexpr (has_two_bit_quants(F)) {
      const __m256i mask = _mm256_set1_epi8(0x03);
      for (int v = 0; v < 2; ++v) {
        const __m256i p = at(64 * v);
        for (int s = 0; s < 4; ++s) u[4 * v + s] = _mm256_and_si256(_mm256_srli_epi16(p, 2 * s), mask);
      }
    } else {
      const __m256i mask = _mm256_set1_epi8(0x0F);
      for (int j = 0; j < 4; ++j) {
        const __m256i p = at(64 * j);
        u[j] = _mm256_and_si256(p, mask);
        u[j + 4] = _mm256_and_si256(_mm256_srli_epi16(p, 4), mask);
      }
    }
    constexpr int kLow = cpu_low_bits(F);
    for (int plane = 0; plane < cpu_high_bit_planes(F); ++plane) {
      const __m256i bits = at(cpu_quant_bytes(F) + 64 * plane), to = _mm256_set1_epi8(static_cast<char>(1 << (kLow + plane)));
      for (int j = 0; j < 8; ++j) {
        const int shift = kLow + plane - j;
        const __m256i moved = shift >= 0 ? _mm256_slli_epi16(bits, shift) : _mm256_srli_epi16(bits, -shift);
        u[j] = _mm256_or_si256(u[j], _mm256_and_si256(moved, to));
      }
    }
  }
}

// Rows 8h..8h+7's fp16 values of the 16 at p, and their int8 values, as fp32.
inline __m256 f16_rows(const std::byte* p, int h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
}
inline __m256 i8_rows(const std::byte* p, int h) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * h))));
}

// Rows 8h..8h+7's scales of a block record (of columns 16·half.. where a scale is per 16), and
// their mins, as the AVX-512 file's block_scales.
template <MatrixFormat F>
inline __m256 block_scales(const std::byte* rec, const std::byte* hdr, int h, int half = 0) {
  if constexpr (!is_k_quant(F)) return f16_rows(rec + cpu_scales_at(F), h);
  return _mm256_mul_ps(f16_rows(hdr, h), i8_rows(rec + cpu_scales_at(F) + kCpuRowGroup * half, h));
}
template <MatrixFormat F>
inline __m256 block_mins(const std::byte* rec, const std::byte* hdr, int h, int half = 0) {
  if constexpr (!is_k_quant(F)) return f16_rows(rec + cpu_mins_at(F), h);
  return _mm256_mul_ps(f16_rows(hdr + 2 * kCpuRowGroup, h), i8_rows(rec + cpu_mins_at(F) + kCpuRowGroup * half, h));
}

// One token's sums of a group's 16 rows (two halves of 8) into its output rows that exist.
inline void store_group(const DotArgs& a, int64_t g, const __m256 acc[2]) {
  for (int h = 0; h < 2; ++h) {
    const int64_t r0 = g * kCpuRowGroup + 8 * h, rows = a.rows - r0 < 8 ? a.rows - r0 : 8;
    alignas(32) float v[8];
    _mm256_store_ps(v, acc[h]);
    for (int64_t r = 0; r < rows; ++r) a.out[r0 + r] = a.accumulate ? a.out[r0 + r] + v[r] : v[r];
  }
}

// One token against a whole group of 16 rows, for the 4-bit formats (u ≤ 15): a block's 8
// products per row and part are summed as int16 pairs (|Σ| ≤ 8 · 2 · 15 · 127 = 30,480, no
// saturation) and widened once per block, both halves of the group share each broadcast of the
// activations, and nothing spills from AVX2's 16 registers (decode of Llama-3.2-1B Q4_0 on 2
// cores of an AMD EPYC: 45-47 -> 33-34 ms a token against the two passes of tile_blocks).
template <MatrixFormat F>
void group_one_token(const DotArgs& a, int64_t g) {
  static_assert(kNibbleQuants<F>);
  const int64_t blocks = a.k / kQuantBlockValues;
  const std::byte* w = a.w + g * a.stride;
  const Q8Block* x = static_cast<const Q8Block*>(a.x);
  const __m256i mask = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const auto four = [](const int8_t* p) { return _mm256_set1_epi32(four_at(p)); };
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < blocks; ++b) {
    const std::byte *rec = record<F>(w, b), *hdr = header<F>(w, b);
    prefetch_ahead<kBlockStream<F>>(rec);
    const Q8Block& xb = x[b];
    __m256i hq[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, hl[2] = {hq[0], hq[1]};
    for (int j = 0; j < 4; ++j) {  // columns 4j..4j+3 (low nibbles) and 16+4j.. (high)
      const __m256i q_low = four(xb.q + 4 * j), lo_low = four(xb.lo + 4 * j);
      const __m256i q_high = four(xb.q + 16 + 4 * j), lo_high = four(xb.lo + 16 + 4 * j);
      for (int h = 0; h < 2; ++h) {
        const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 64 * j + 32 * h));
        const __m256i u_low = _mm256_and_si256(p, mask), u_high = _mm256_and_si256(_mm256_srli_epi16(p, 4), mask);
        hq[h] = _mm256_add_epi16(hq[h], _mm256_maddubs_epi16(u_low, q_low));
        hl[h] = _mm256_add_epi16(hl[h], _mm256_maddubs_epi16(u_low, lo_low));
        hq[h] = _mm256_add_epi16(hq[h], _mm256_maddubs_epi16(u_high, q_high));
        hl[h] = _mm256_add_epi16(hl[h], _mm256_maddubs_epi16(u_high, lo_high));
      }
    }
    const __m256 step = _mm256_set1_ps(xb.step);
    for (int h = 0; h < 2; ++h) {
      const __m256i hi = _mm256_madd_epi16(hq[h], ones);
      const __m256i lo = _mm256_add_epi32(_mm256_madd_epi16(hl[h], ones), _mm256_set1_epi32(-kQuantOffset<F> * xb.total));
      const __m256i sum = _mm256_add_epi32(_mm256_slli_epi32(hi, 7), lo);
      acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(block_scales<F>(rec, hdr, h), step), acc[h]);
      if constexpr (cpu_has_min(F)) acc[h] = _mm256_fmadd_ps(block_mins<F>(rec, hdr, h), _mm256_set1_ps(xb.sum), acc[h]);
    }
  }
  store_group(a, g, acc);
}

// One token against a whole group of 16 rows for Q8_0: its quants (w + 128) go into vpmaddubsw
// as |w| with w's signs moved onto the activations (as tile_blocks), whose int16 pairs can reach
// 2 · 128 · 127 and so widen at once; as group_one_token, both halves share each broadcast and
// nothing spills (tile_blocks' arrays of 8 quants and 8 signs do).
inline void group_one_token_q8_0(const DotArgs& a, int64_t g) {
  constexpr MatrixFormat F = MatrixFormat::q8_0;
  constexpr int64_t kBlock = cpu_block_bytes(F);
  const int64_t blocks = a.k / kQuantBlockValues;
  const std::byte* w = a.w + g * a.stride;
  const Q8Block* x = static_cast<const Q8Block*>(a.x);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi16(1);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < blocks; ++b) {
    const std::byte* rec = w + b * kBlock;
    prefetch_ahead<kBlock>(rec);
    const Q8Block& xb = x[b];
    __m256i hi[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, lo[2] = {hi[0], hi[1]};
    for (int j = 0; j < 8; ++j) {
      const __m256i q = _mm256_set1_epi32(four_at(xb.q + 4 * j)), l = _mm256_set1_epi32(four_at(xb.lo + 4 * j));
      for (int h = 0; h < 2; ++h) {
        const __m256i signs = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 64 * j + 32 * h)), flip);
        const __m256i u = _mm256_abs_epi8(signs);
        hi[h] = _mm256_add_epi32(hi[h], _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(q, signs)), ones));
        lo[h] = _mm256_add_epi32(lo[h], _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(l, signs)), ones));
      }
    }
    const __m256 step = _mm256_set1_ps(xb.step);
    for (int h = 0; h < 2; ++h) {
      const __m256i sum = _mm256_add_epi32(_mm256_slli_epi32(hi[h], 7), lo[h]);
      acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(block_scales<F>(rec, nullptr, h), step), acc[h]);
    }
  }
  store_group(a, g, acc);
}

// C tokens against a group's rows 8h..8h+7: the quants unpacked once for the C tokens, then one
// token's two sums at a time in registers, a block's vpmaddubsw results summed as int16 pairs for
// kInt16Terms products before they widen (4-bit: 8 · 2 · 15 · 127 = 30,480; 5-bit, u ≤ 31: 4 ·
// 2 · 31 · 127 = 31,496; Q6_K, u ≤ 63: 2 · 2 · 63 · 127 = 32,004; Q2_K and Q3_K, u ≤ 7: a half's
// 4; Q8_0's |w| ≤ 128 against signed activations: each at once).
template <MatrixFormat F>
constexpr int kInt16Terms = F == MatrixFormat::q8_0        ? 1
                            : has_fifth_bits(F)            ? 4
                            : F == MatrixFormat::q6_k      ? 2
                            : has_two_bit_quants(F)        ? 4
                                                           : 8;

template <MatrixFormat F, int C>
void tile_blocks(const DotArgs& a, int64_t g, int64_t t0) {
  constexpr int kOffset = F == MatrixFormat::q8_0 ? 0 : kQuantOffset<F>;  // Q8_0: signed weights here
  const int64_t blocks = a.k / kQuantBlockValues;
  const std::byte* w = a.w + g * a.stride;
  const Q8Block* x = static_cast<const Q8Block*>(a.x) + t0 * a.act_stride;
  const __m256i ones = _mm256_set1_epi16(1);
  const auto four = [](const int8_t* p) { return _mm256_set1_epi32(four_at(p)); };
  for (int h = 0; h < 2 && g * kCpuRowGroup + 8 * h < a.rows; ++h) {
    __m256 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      const std::byte *rec = record<F>(w, b), *hdr = header<F>(w, b);
      prefetch_ahead<kBlockStream<F>>(rec);
      __m256i u[8], signs[8];
      unpack<F>(rec, h, u, signs);
      if constexpr (kHalfScales<F>) {
        const __m256 scale[2] = {block_scales<F>(rec, hdr, h, 0), block_scales<F>(rec, hdr, h, 1)};
        __m256 min[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        if constexpr (cpu_has_min(F)) min[0] = block_mins<F>(rec, hdr, h, 0), min[1] = block_mins<F>(rec, hdr, h, 1);
        for (int c = 0; c < C; ++c) {
          const Q8Block& xb = x[c * a.act_stride + b];
          const int32_t totals[2] = {xb.total_first, xb.total - xb.total_first};
          __m256 v = _mm256_setzero_ps();
          for (int half = 0; half < 2; ++half) {
            __m256i hi = _mm256_setzero_si256(), lo = _mm256_set1_epi32(-kOffset * totals[half]);
            for (int j0 = 4 * half; j0 < 4 * half + 4; j0 += kInt16Terms<F>) {
              __m256i hq = _mm256_setzero_si256(), hl = _mm256_setzero_si256();
              for (int j = j0; j < j0 + kInt16Terms<F>; ++j) {
                hq = _mm256_add_epi16(hq, _mm256_maddubs_epi16(u[j], four(xb.q + 4 * j)));
                hl = _mm256_add_epi16(hl, _mm256_maddubs_epi16(u[j], four(xb.lo + 4 * j)));
              }
              hi = _mm256_add_epi32(hi, _mm256_madd_epi16(hq, ones));
              lo = _mm256_add_epi32(lo, _mm256_madd_epi16(hl, ones));
            }
            v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_slli_epi32(hi, 7), lo)), scale[half], v);
          }
          acc[c] = _mm256_fmadd_ps(v, _mm256_set1_ps(xb.step), acc[c]);
          if constexpr (cpu_has_min(F)) {  // each half's min times its Σx
            for (int half = 0; half < 2; ++half) {
              acc[c] = _mm256_fmadd_ps(min[half], _mm256_set1_ps(xb.step * static_cast<float>(totals[half])), acc[c]);
            }
          }
        }
        continue;
      }
      const __m256 scale = block_scales<F>(rec, hdr, h);
      for (int c = 0; c < C; ++c) {
        const Q8Block& xb = x[c * a.act_stride + b];
        __m256i hi = _mm256_setzero_si256(), lo = _mm256_set1_epi32(-kOffset * xb.total);
        for (int j0 = 0; j0 < 8; j0 += kInt16Terms<F>) {
          __m256i hq = _mm256_setzero_si256(), hl = _mm256_setzero_si256();
          for (int j = j0; j < j0 + kInt16Terms<F>; ++j) {
            __m256i q = four(xb.q + 4 * j), l = four(xb.lo + 4 * j);
            if constexpr (F == MatrixFormat::q8_0) {
              q = _mm256_sign_epi8(q, signs[j]);
              l = _mm256_sign_epi8(l, signs[j]);
            }
            hq = _mm256_add_epi16(hq, _mm256_maddubs_epi16(u[j], q));
            hl = _mm256_add_epi16(hl, _mm256_maddubs_epi16(u[j], l));
          }
          hi = _mm256_add_epi32(hi, _mm256_madd_epi16(hq, ones));
          lo = _mm256_add_epi32(lo, _mm256_madd_epi16(hl, ones));
        }
        const __m256i sum = _mm256_add_epi32(_mm256_slli_epi32(hi, 7), lo);
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(scale, _mm256_set1_ps(xb.step)), acc[c]);
        if constexpr (cpu_has_min(F)) acc[c] = _mm256_fmadd_ps(block_mins<F>(rec, hdr, h), _mm256_set1_ps(xb.sum), acc[c]);
      }
    }
    const int64_t r0 = g * kCpuRowGroup + 8 * h, rows = a.rows - r0 < 8 ? a.rows - r0 : 8;
    for (int c = 0; c < C; ++c) {
      float* o = a.out + (t0 + c) * a.out_stride + r0;
      alignas(32) float v[8];
      _mm256_store_ps(v, acc[c]);
      for (int64_t r = 0; r < rows; ++r) o[r] = a.accumulate ? o[r] + v[r] : v[r];
    }
  }
}

#endif

#if KILN_DOT_SIMD

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#if KILN_DOT_SIMD == 2
using FloatVec = __m512;  // bf16 rows: 16 columns at a time
constexpr int kBf16Lanes = 16;
inline FloatVec zero_vec() { return _mm512_setzero_ps(); }
inline FloatVec bf16_vec(const uint16_t* p) {  // bf16 is the top half of an fp32: widen and shift
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
inline FloatVec load_vec(const float* p) { return _mm512_loadu_ps(p); }
inline FloatVec fma_vec(FloatVec a, FloatVec b, FloatVec c) { return _mm512_fmadd_ps(a, b, c); }
inline float sum_vec(FloatVec v) { return _mm512_reduce_add_ps(v); }
#else
using FloatVec = __m256;  // 8 columns at a time
constexpr int kBf16Lanes = 8;
inline FloatVec zero_vec() { return _mm256_setzero_ps(); }
inline FloatVec bf16_vec(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
inline FloatVec load_vec(const float* p) { return _mm256_loadu_ps(p); }
inline FloatVec fma_vec(FloatVec a, FloatVec b, FloatVec c) { return _mm256_fmadd_ps(a, b, c); }
inline float sum_vec(FloatVec v) { return hsum(v); }
#endif

template <int R, int C>
void tile_bf16(const DotArgs& a, int64_t r0, int64_t t0) {
  const int64_t stride = a.stride / 2;
  const uint16_t* w = reinterpret_cast<const uint16_t*>(a.w) + r0 * stride;
  const float* x = static_cast<const float*>(a.x) + t0 * a.act_stride;
  FloatVec acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = zero_vec();
  }
  int64_t i = 0;
  for (; i + kBf16Lanes <= a.k; i += kBf16Lanes) {
    FloatVec wv[R];
    for (int r = 0; r < R; ++r) wv[r] = bf16_vec(w + r * stride + i);
    for (int c = 0; c < C; ++c) {
      const FloatVec xv = load_vec(x + c * a.act_stride + i);
      for (int r = 0; r < R; ++r) acc[r][c] = fma_vec(wv[r], xv, acc[r][c]);
    }
  }
  for (int c = 0; c < C; ++c) {
    float* o = a.out + (t0 + c) * a.out_stride + r0;
    for (int r = 0; r < R; ++r) {
      float v = sum_vec(acc[r][c]);
      for (int64_t j = i; j < a.k; ++j) {
        const uint32_t bits = static_cast<uint32_t>(w[r * stride + j]) << 16;
        float wf;
        std::memcpy(&wf, &bits, 4);
        v += wf * x[c * a.act_stride + j];
      }
      o[r] = a.accumulate ? o[r] + v : v;
    }
  }
}

#else  // portable: the same sums, one value at a time

inline float f16_at(const std::byte* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0) {  // zero or subnormal: mant · 2^-24, exact in fp32
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  } else {
    bits = sign | (exp == 31 ? 0x7F800000u | (mant << 13) : ((exp + 112) << 23) | (mant << 13));
  }
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

// Row `lane`'s scale of a block record (of columns 16·half.. where a scale is per 16), and its
// min, as the SIMD files' block_scales.
template <MatrixFormat F>
float block_scale(const std::byte* rec, const std::byte* hdr, int64_t lane, int half = 0) {
  if constexpr (!is_k_quant(F)) return f16_at(rec + cpu_scales_at(F) + 2 * lane);
  return f16_at(hdr + 2 * lane) * static_cast<float>(static_cast<int8_t>(rec[cpu_scales_at(F) + kCpuRowGroup * half + lane]));
}
template <MatrixFormat F>
float block_min(const std::byte* rec, const std::byte* hdr, int64_t lane, int half = 0) {
  if constexpr (!is_k_quant(F)) return f16_at(rec + cpu_mins_at(F) + 2 * lane);
  return f16_at(hdr + 2 * kCpuRowGroup + 2 * lane) * static_cast<float>(static_cast<int8_t>(rec[cpu_mins_at(F) + kCpuRowGroup * half + lane]));
}

// Row `lane`'s unsigned quant of column c (0..31) of a block record.
template <MatrixFormat F>
int32_t quant_at(const std::byte* rec, int64_t lane, int c) {
  if constexpr (F == MatrixFormat::q8_0) return static_cast<uint8_t>(rec[64 * (c / 4) + 4 * lane + c % 4]);
  constexpr int kLow = cpu_low_bits(F);
  int32_t u;
  if constexpr (kLow == 2) {  // bits 2·s of vector v: column 4·(4·v + s) + i
    u = (static_cast<uint8_t>(rec[64 * (c / 16) + 4 * lane + c % 4]) >> (2 * ((c / 4) % 4))) & 3;
  } else {
    const int col = c % 16;
    const auto byte = static_cast<uint8_t>(rec[64 * (col / 4) + 4 * lane + col % 4]);
    u = c < 16 ? byte & 0x0F : byte >> 4;
  }
  for (int plane = 0; plane < cpu_high_bit_planes(F); ++plane) {
    u |= ((static_cast<uint8_t>(rec[cpu_quant_bytes(F) + 64 * plane + 4 * lane + c % 4]) >> (c / 4)) & 1) << (kLow + plane);
  }
  return u;
}

template <MatrixFormat F, int C>
void tile_blocks(const DotArgs& a, int64_t g, int64_t t0) {
  const std::byte* w = a.w + g * a.stride;
  const Q8Block* x = static_cast<const Q8Block*>(a.x) + t0 * a.act_stride;
  const int64_t r0 = g * kCpuRowGroup;
  for (int64_t lane = 0; lane < kCpuRowGroup && r0 + lane < a.rows; ++lane) {
    for (int c = 0; c < C; ++c) {
      float v = 0.0f;
      for (int64_t b = 0; b < a.k / kQuantBlockValues; ++b) {
        const std::byte *rec = record<F>(w, b), *hdr = header<F>(w, b);
        const Q8Block& xb = x[c * a.act_stride + b];
        if constexpr (kHalfScales<F>) {  // d·sc per half (Q2_K: and its min times the half's Σx)
          const int32_t totals[2] = {xb.total_first, xb.total - xb.total_first};
          float sum = 0.0f;
          for (int h = 0; h < 2; ++h) {
            int32_t hi = 0, lo = -kQuantOffset<F> * totals[h];
            for (int i = 16 * h; i < 16 * h + 16; ++i) {
              const int32_t u = quant_at<F>(rec, lane, i);
              hi += u * xb.q[i];
              lo += u * xb.lo[i];
            }
            sum += static_cast<float>(128 * hi + lo) * block_scale<F>(rec, hdr, lane, h);
          }
          v += sum * xb.step;
          if constexpr (cpu_has_min(F)) {
            for (int h = 0; h < 2; ++h) v += block_min<F>(rec, hdr, lane, h) * (xb.step * static_cast<float>(totals[h]));
          }
          continue;
        }
        int32_t hi = 0, lo = -kQuantOffset<F> * xb.total;
        for (int i = 0; i < kQuantBlockValues; ++i) {
          const int32_t u = quant_at<F>(rec, lane, i);
          hi += u * xb.q[i];
          lo += u * xb.lo[i];
        }
        v += static_cast<float>(128 * hi + lo) * (block_scale<F>(rec, hdr, lane) * xb.step);
        if constexpr (cpu_has_min(F)) v += block_min<F>(rec, hdr, lane) * xb.sum;
      }
      float& o = a.out[(t0 + c) * a.out_stride + r0 + lane];
      o = a.accumulate ? o + v : v;
    }
  }
}

template <int R, int C>
void tile_bf16(const DotArgs& a, int64_t r0, int64_t t0) {
  const int64_t stride = a.stride / 2;
  const float* x = static_cast<const float*>(a.x) + t0 * a.act_stride;
  for (int r = 0; r < R; ++r) {
    const uint16_t* w = reinterpret_cast<const uint16_t*>(a.w) + (r0 + r) * stride;
    for (int c = 0; c < C; ++c) {
      float v = 0.0f;
      for (int64_t j = 0; j < a.k; ++j) {
        const uint32_t bits = static_cast<uint32_t>(w[j]) << 16;
        float wf;
        std::memcpy(&wf, &bits, 4);
        v += wf * x[c * a.act_stride + j];
      }
      float& o = a.out[(t0 + c) * a.out_stride + r0 + r];
      o = a.accumulate ? o + v : v;
    }
  }
}

#endif

// Tokens a tile of a block format takes (AVX2's tiles keep one token's sums in registers at a
// time, so more tokens only cost memory for their float sums; Q8_0's 8 quant and 8 sign vectors
// already fill the registers, so it stays at 4).
template <MatrixFormat F>
constexpr int kTileTokens = KILN_DOT_SIMD == 1 && F != MatrixFormat::q8_0 ? 8 : kBlockTokens;

template <MatrixFormat F>
struct GroupTile {
  const DotArgs& a;
  int64_t g;
  template <int C>
  void run(int64_t t) const { tile_blocks<F, C>(a, g, t); }
};

template <int R>
struct Bf16Tile {
  const DotArgs& a;
  int64_t r;
  template <int C>
  void run(int64_t t) const { tile_bf16<R, C>(a, r, t); }
};

template <MatrixFormat F>
void run_blocks(const DotArgs& a) {
#if KILN_DOT_SIMD == 1
  if constexpr (kNibbleQuants<F> || F == MatrixFormat::q8_0) {
    if (a.tokens == 1) {
      for (int64_t g = 0; g * kCpuRowGroup < a.rows; ++g) {
        if constexpr (F == MatrixFormat::q8_0) {
          group_one_token_q8_0(a, g);
        } else {
          group_one_token<F>(a, g);
        }
      }
      return;
    }
  }
#endif
  for (int64_t g = 0; g * kCpuRowGroup < a.rows; ++g) against_tokens<kTileTokens<F>>(GroupTile<F>{a, g}, a.tokens);
}

inline void run_bf16(const DotArgs& a) {
  int64_t r = 0;
#if KILN_DOT_SIMD == 1
  // One token (decode) streams the rows and is bound by how many are read at once: 8 rows a tile
  // on AVX2 (Llama-3.2-1B bf16 on 2 cores of an AMD EPYC, runs alternating: 78-96 ms a token where
  // 2 rows took 108-124; 16 rows 107-124, 4 rows of 2 vectors a step 81-84; the read bandwidth
  // makes 71).
  if (a.tokens == 1) {
    for (; r + kBf16DecodeRows <= a.rows; r += kBf16DecodeRows) tile_bf16<kBf16DecodeRows, 1>(a, r, 0);
    for (; r < a.rows; ++r) tile_bf16<1, 1>(a, r, 0);
    return;
  }
#endif
  for (; r + kBf16Rows <= a.rows; r += kBf16Rows) against_tokens<kBf16Tokens>(Bf16Tile<kBf16Rows>{a, r}, a.tokens);
  for (; r < a.rows; ++r) against_tokens<kBf16Tokens>(Bf16Tile<1>{a, r}, a.tokens);
}

// Every format this file has a kernel for; the caller checked the format (linear.cpp).
inline void run(MatrixFormat format, const DotArgs& a) {
  switch (format) {
    case MatrixFormat::q8_0: run_blocks<MatrixFormat::q8_0>(a); break;
    case MatrixFormat::q4_0: run_blocks<MatrixFormat::q4_0>(a); break;
    case MatrixFormat::q4_1: run_blocks<MatrixFormat::q4_1>(a); break;
    case MatrixFormat::q5_0: run_blocks<MatrixFormat::q5_0>(a); break;
    case MatrixFormat::q5_1: run_blocks<MatrixFormat::q5_1>(a); break;
    case MatrixFormat::q5_k: run_blocks<MatrixFormat::q5_k>(a); break;
    case MatrixFormat::q4_k: run_blocks<MatrixFormat::q4_k>(a); break;
    case MatrixFormat::q6_k: run_blocks<MatrixFormat::q6_k>(a); break;
    case MatrixFormat::q2_k: run_blocks<MatrixFormat::q2_k>(a); break;
    case MatrixFormat::q3_k: run_blocks<MatrixFormat::q3_k>(a); break;
    case MatrixFormat::bf16: run_bf16(a); break;
    case MatrixFormat::fp8:  // the GPU's only (is_cpu_block_format)
    case MatrixFormat::bf16_packed:  // bf16_avx512.cpp's only (linear.cpp)
    case MatrixFormat::f32: break;
  }
}

}  // namespace kiln::cpu::KILN_DOT_NS
