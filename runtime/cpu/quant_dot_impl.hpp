// The body of the dot-product kernels (quant_dot.hpp), compiled once per instruction set: each
// quant_dot_<isa>.cpp defines KILN_DOT_SIMD (0 portable, 1 AVX2, 2 AVX-512 VNNI) and KILN_DOT_NS
// and includes this inside nothing but its own namespace. No std templates here: an inline std
// function instantiated in the AVX-512 file could be the copy the linker keeps for every caller.
//
// A tile is R weight rows × C tokens: each weight block is loaded (and its nibbles unpacked) once
// for C tokens, each activation block once for R rows; the R × C sums stay in registers.
#pragma once

#include <cstring>

#include "runtime/cpu/quant_dot.hpp"

#if KILN_DOT_SIMD
#include <immintrin.h>
#endif

namespace kiln::cpu::KILN_DOT_NS {

#if KILN_DOT_SIMD == 2
constexpr int kRows = 2, kTokens = 6;  // 12 sums in 32 registers: the best of 1-4 rows × 2-8 tokens measured (SmolLM2 Q4_1)
#else
constexpr int kRows = 2, kTokens = 2;  // AVX2's 16 registers
#endif

// Where a pair record's scales start (after the quants and Q5_0's fifth bits), and whether they
// are fp32 (Q4_K) or fp16; formats with a min (Q4_1, Q4_K) keep it after the scales.
template <MatrixFormat F>
constexpr int64_t kScalesAt = (F == MatrixFormat::q8_0 ? 64 : 32) + (F == MatrixFormat::q5_0 ? 8 : 0);
template <MatrixFormat F>
constexpr bool kHasMin = F == MatrixFormat::q4_1 || F == MatrixFormat::q4_k;
template <MatrixFormat F>
constexpr int64_t kMinAt = kScalesAt<F> + (F == MatrixFormat::q4_k ? 8 : 4);
// The offset of the unsigned quants (value = scale · (q - offset)): folded into the integer sum.
template <MatrixFormat F>
constexpr int kQuantOffset = F == MatrixFormat::q4_0 ? 8 : F == MatrixFormat::q5_0 ? 16 : 0;

#if KILN_DOT_SIMD == 2
// The two fp16 values at p as fp32, repeated over the lanes ([v0, v1, v0, v1, …]): a record's
// scales or mins, matching the dot's lanes.
inline __m512 pair_at(const std::byte* p) {
  int32_t bits;
  std::memcpy(&bits, p, 4);
  return _mm512_castpd_ps(_mm512_broadcastsd_pd(_mm_castps_pd(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))));
}
inline __m512 pair_f32_at(const std::byte* p) {
  double v;
  std::memcpy(&v, p, 8);
  return _mm512_castpd_ps(_mm512_set1_pd(v));
}
#elif KILN_DOT_SIMD == 1
inline __m256 pair_at(const std::byte* p) {
  int32_t bits;
  std::memcpy(&bits, p, 4);
  return _mm256_castpd_ps(_mm256_broadcastsd_pd(_mm_castps_pd(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))));
}
inline __m256 pair_f32_at(const std::byte* p) {
  double v;
  std::memcpy(&v, p, 8);
  return _mm256_castpd_ps(_mm256_set1_pd(v));
}
#else
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
// Scale (or min) b of a pair record's pair at p.
template <MatrixFormat F>
float scale_at(const std::byte* p, int b) {
  if constexpr (F == MatrixFormat::q4_k) {
    float v;
    std::memcpy(&v, p + 4 * b, 4);
    return v;
  } else {
    return f16_at(p + 2 * b);
  }
}
#endif

#if KILN_DOT_SIMD

// How far ahead of the record it reads each row asks for its weights: a tile streams R rows at
// once, more streams than the hardware prefetcher follows well.
constexpr int64_t kPrefetchBytes = 1024;

// Σ of 4 adjacent u8 · s8 products into each of 8 int32 lanes, added to acc. Without VNNI,
// maddubs's int16 pairs cannot saturate: |u| ≤ 128 and |s| ≤ 127 in every use below (u ≤ 15
// against q, |u| ≤ 128 against |lo| ≤ 64 or |q| ≤ 127).
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if KILN_DOT_SIMD == 2
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#if KILN_DOT_SIMD == 2

// One pair (64 values) at a time in 512-bit registers.
template <MatrixFormat F, int R, int C>
void tile_blocks(const DotArgs& a, int64_t r0, int64_t t0) {
  constexpr int64_t kPair = cpu_pair_bytes(F);
  const int64_t pairs = activation_pairs(a.k);
  const std::byte* w = a.w + r0 * a.row_bytes;
  const Q8Pair* x = static_cast<const Q8Pair*>(a.x) + t0 * a.act_stride;
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < pairs; ++p) {
    __m512i u[R];
    __mmask64 negative[R];
    __m512 scale[R], min[R];
    for (int r = 0; r < R; ++r) {
      const std::byte* rec = w + r * a.row_bytes + p * kPair;
      _mm_prefetch(reinterpret_cast<const char*>(rec) + kPrefetchBytes, _MM_HINT_T0);
      if constexpr (F == MatrixFormat::q8_0) {
        // Signed quants: |w| as the unsigned operand, the sign moved onto the activations.
        const __m512i v = _mm512_loadu_si512(rec);
        u[r] = _mm512_abs_epi8(v);
        negative[r] = _mm512_movepi8_mask(v);
      } else {  // positions 0..31 in the low nibbles, 32..63 in the high ones
        const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec));
        u[r] = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(y), _mm256_srli_epi16(y, 4), 1),
                                _mm512_set1_epi8(0x0F));
        if constexpr (F == MatrixFormat::q5_0) {  // + 16 where the fifth bit is set
          uint64_t fifth;
          std::memcpy(&fifth, rec + 32, 8);
          u[r] = _mm512_mask_add_epi8(u[r], _cvtu64_mask64(fifth), u[r], _mm512_set1_epi8(16));
        }
      }
      scale[r] = F == MatrixFormat::q4_k ? pair_f32_at(rec + kScalesAt<F>) : pair_at(rec + kScalesAt<F>);
      if constexpr (kHasMin<F>) min[r] = F == MatrixFormat::q4_k ? pair_f32_at(rec + kMinAt<F>) : pair_at(rec + kMinAt<F>);
    }
    for (int c = 0; c < C; ++c) {
      const Q8Pair& xp = x[c * a.act_stride + p];
      const __m512i q = _mm512_load_si512(xp.q), lo = _mm512_load_si512(xp.lo);
      const __m512 step = _mm512_load_ps(xp.step);
      for (int r = 0; r < R; ++r) {
        __m512i qs = q, los = lo;
        if constexpr (F == MatrixFormat::q8_0) {
          qs = _mm512_mask_sub_epi8(q, negative[r], zero, q);
          los = _mm512_mask_sub_epi8(lo, negative[r], zero, lo);
        }
        __m512i init = zero;  // the quants' offset: -8·Σ (Q4_0) or -16·Σ (Q5_0)
        if constexpr (kQuantOffset<F> > 0) init = _mm512_load_si512(xp.offset);
        if constexpr (kQuantOffset<F> == 16) init = _mm512_add_epi32(init, init);
        const __m512i hi_sum = _mm512_dpbusd_epi32(zero, u[r], qs);
        const __m512i lo_sum = _mm512_dpbusd_epi32(init, u[r], los);
        const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(hi_sum, 7), lo_sum);
        acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(scale[r], step), acc[r][c]);
        if constexpr (kHasMin<F>) acc[r][c] = _mm512_fmadd_ps(min[r], _mm512_load_ps(xp.sum), acc[r][c]);
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    float* o = a.out + (t0 + c) * a.out_stride + r0;
    for (int r = 0; r < R; ++r) {
      const float v = _mm512_reduce_add_ps(acc[r][c]);
      o[r] = a.accumulate ? o[r] + v : v;
    }
  }
}

#else

// One pair at a time as two 256-bit halves (positions 0..31, 32..63: both blocks in each).
template <MatrixFormat F, int R, int C>
void tile_blocks(const DotArgs& a, int64_t r0, int64_t t0) {
  constexpr int64_t kPair = cpu_pair_bytes(F);
  const int64_t pairs = activation_pairs(a.k);
  const std::byte* w = a.w + r0 * a.row_bytes;
  const Q8Pair* x = static_cast<const Q8Pair*>(a.x) + t0 * a.act_stride;
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  for (int64_t p = 0; p < pairs; ++p) {
    __m256i u[R][2], signs[R][2];
    __m256 scale[R], min[R];
    for (int r = 0; r < R; ++r) {
      const std::byte* rec = w + r * a.row_bytes + p * kPair;
      _mm_prefetch(reinterpret_cast<const char*>(rec) + kPrefetchBytes, _MM_HINT_T0);
      if constexpr (F == MatrixFormat::q8_0) {
        for (int h = 0; h < 2; ++h) {  // |w| unsigned, its sign moved onto the activations
          signs[r][h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32 * h));
          u[r][h] = _mm256_sign_epi8(signs[r][h], signs[r][h]);
        }
      } else {
        const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec));
        const __m256i mask = _mm256_set1_epi8(0x0F);
        u[r][0] = _mm256_and_si256(y, mask);
        u[r][1] = _mm256_and_si256(_mm256_srli_epi16(y, 4), mask);
        if constexpr (F == MatrixFormat::q5_0) {
          for (int h = 0; h < 2; ++h) {  // + 16 where the fifth bit is set: each bit widened to a byte
            int32_t fifth;
            std::memcpy(&fifth, rec + 32 + 4 * h, 4);
            const __m256i spread = _mm256_shuffle_epi8(
                _mm256_set1_epi32(fifth), _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
            const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
            const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
            u[r][h] = _mm256_add_epi8(u[r][h], _mm256_and_si256(set, _mm256_set1_epi8(16)));
          }
        }
      }
      scale[r] = F == MatrixFormat::q4_k ? pair_f32_at(rec + kScalesAt<F>) : pair_at(rec + kScalesAt<F>);
      if constexpr (kHasMin<F>) min[r] = F == MatrixFormat::q4_k ? pair_f32_at(rec + kMinAt<F>) : pair_at(rec + kMinAt<F>);
    }
    for (int c = 0; c < C; ++c) {
      const Q8Pair& xp = x[c * a.act_stride + p];
      const __m256 step = _mm256_load_ps(xp.step);  // its 8 lanes' pattern is every half's
      for (int h = 0; h < 2; ++h) {
        const __m256i q = _mm256_load_si256(reinterpret_cast<const __m256i*>(xp.q + 32 * h));
        const __m256i lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(xp.lo + 32 * h));
        for (int r = 0; r < R; ++r) {
          __m256i qs = q, los = lo;
          if constexpr (F == MatrixFormat::q8_0) {
            qs = _mm256_sign_epi8(q, signs[r][h]);
            los = _mm256_sign_epi8(lo, signs[r][h]);
          }
          __m256i init = _mm256_setzero_si256();  // the quants' offset (lanes 0 and 1: the first half)
          if (kQuantOffset<F> > 0 && h == 0) init = _mm256_load_si256(reinterpret_cast<const __m256i*>(xp.offset));
          if (kQuantOffset<F> == 16 && h == 0) init = _mm256_add_epi32(init, init);
          const __m256i sum = _mm256_add_epi32(_mm256_slli_epi32(dot_u8s8(_mm256_setzero_si256(), u[r][h], qs), 7),
                                               dot_u8s8(init, u[r][h], los));
          acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(scale[r], step), acc[r][c]);
          if (kHasMin<F> && h == 0) acc[r][c] = _mm256_fmadd_ps(min[r], _mm256_load_ps(xp.sum), acc[r][c]);
        }
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    float* o = a.out + (t0 + c) * a.out_stride + r0;
    for (int r = 0; r < R; ++r) o[r] = a.accumulate ? o[r] + hsum(acc[r][c]) : hsum(acc[r][c]);
  }
}

#endif

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
  const int64_t stride = a.row_bytes / 2;
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

template <MatrixFormat F, int R, int C>
void tile_blocks(const DotArgs& a, int64_t r0, int64_t t0) {
  constexpr int64_t kPair = cpu_pair_bytes(F);
  const int64_t pairs = activation_pairs(a.k);
  const Q8Pair* x = static_cast<const Q8Pair*>(a.x) + t0 * a.act_stride;
  for (int r = 0; r < R; ++r) {
    const std::byte* row = a.w + (r0 + r) * a.row_bytes;
    for (int c = 0; c < C; ++c) {
      float v = 0.0f;
      for (int64_t p = 0; p < pairs; ++p) {
        const std::byte* rec = row + p * kPair;
        const Q8Pair& xp = x[c * a.act_stride + p];
        int32_t sum[2] = {0, 0};  // per block: even and odd 4-byte lanes
        for (int i = 0; i < 64; ++i) {
          int32_t wq;
          if constexpr (F == MatrixFormat::q8_0) {
            wq = static_cast<int8_t>(rec[i]);
          } else {
            const auto byte = static_cast<uint8_t>(rec[i % 32]);
            wq = i < 32 ? byte & 0x0F : byte >> 4;
            if constexpr (F == MatrixFormat::q5_0) wq |= ((static_cast<uint8_t>(rec[32 + i / 8]) >> (i % 8)) & 1) << 4;
          }
          sum[(i / 4) % 2] += wq * (128 * xp.q[i] + xp.lo[i]);
        }
        for (int b = 0; b < 2; ++b) {
          sum[b] += kQuantOffset<F> / 8 * xp.offset[b];
          v += static_cast<float>(sum[b]) * (scale_at<F>(rec + kScalesAt<F>, b) * xp.step[b]);
          if constexpr (kHasMin<F>) v += scale_at<F>(rec + kMinAt<F>, b) * xp.sum[b];
        }
      }
      float& o = a.out[(t0 + c) * a.out_stride + r0 + r];
      o = a.accumulate ? o + v : v;
    }
  }
}

template <int R, int C>
void tile_bf16(const DotArgs& a, int64_t r0, int64_t t0) {
  const int64_t stride = a.row_bytes / 2;
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

template <MatrixFormat F, int R, int C>
void tile(const DotArgs& a, int64_t r0, int64_t t0) {
  if constexpr (F == MatrixFormat::bf16) {
    tile_bf16<R, C>(a, r0, t0);
  } else {
    tile_blocks<F, R, C>(a, r0, t0);
  }
}

// The last `left` (< kTokens) tokens from t: one tile of exactly that many.
template <MatrixFormat F, int R, int C = kTokens - 1>
void tail_tokens(const DotArgs& a, int64_t r0, int64_t t, int64_t left) {
  if constexpr (C >= 1) {
    if (left == C) return tile<F, R, C>(a, r0, t);
    tail_tokens<F, R, C - 1>(a, r0, t, left);
  }
}

// R rows against every token: whole tiles of kTokens, then the rest.
template <MatrixFormat F, int R>
void rows_against_tokens(const DotArgs& a, int64_t r0) {
  int64_t t = 0;
  for (; t + kTokens <= a.tokens; t += kTokens) tile<F, R, kTokens>(a, r0, t);
  tail_tokens<F, R>(a, r0, t, a.tokens - t);
}

template <MatrixFormat F>
void run_format(const DotArgs& a) {
  int64_t r = 0;
  for (; r + kRows <= a.rows; r += kRows) rows_against_tokens<F, kRows>(a, r);
  for (; r < a.rows; ++r) rows_against_tokens<F, 1>(a, r);
}

// Every format this file has a kernel for; the caller checked the format (linear.cpp).
inline void run(MatrixFormat format, const DotArgs& a) {
  switch (format) {
    case MatrixFormat::q8_0: run_format<MatrixFormat::q8_0>(a); break;
    case MatrixFormat::q4_0: run_format<MatrixFormat::q4_0>(a); break;
    case MatrixFormat::q4_1: run_format<MatrixFormat::q4_1>(a); break;
    case MatrixFormat::q5_0: run_format<MatrixFormat::q5_0>(a); break;
    case MatrixFormat::q4_k: run_format<MatrixFormat::q4_k>(a); break;
    case MatrixFormat::bf16: run_format<MatrixFormat::bf16>(a); break;
    case MatrixFormat::f32: break;
  }
}

}  // namespace kiln::cpu::KILN_DOT_NS
