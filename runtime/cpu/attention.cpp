#include "runtime/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/core/dtype.hpp"
#include "runtime/core/parallel.hpp"

namespace kiln::cpu {

namespace {

// Queries of one sequence in a step from which its keys and values are widened to fp32 first.
constexpr int64_t kWidenQueries = 4;

// The helpers below take and return 8-float vectors; they are inlined into each target clone of
// attend(), so no call ever passes one (GCC warns about the ABI of such calls without AVX).
#pragma GCC diagnostic ignored "-Wpsabi"

// 8 floats as one value of GCC's / Clang's vector extension: one AVX register (half of an
// AVX-512 one), 2 SSE ones, with no intrinsics to pick per instruction set.
typedef float Vec8 __attribute__((vector_size(32)));
typedef uint16_t Bf16x8 __attribute__((vector_size(16)));
typedef uint32_t U32x8 __attribute__((vector_size(32)));

inline __attribute__((always_inline)) Vec8 load8(const float* p) {
  Vec8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// 8 bf16 values as floats: a bf16 is the high half of a float's bits.
inline __attribute__((always_inline)) Vec8 load8(const uint16_t* p) {
  Bf16x8 h;
  std::memcpy(&h, p, sizeof(h));
  const U32x8 bits = __builtin_convertvector(h, U32x8) << 16;
  Vec8 v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

inline float value_of(float v) { return v; }
inline float value_of(uint16_t bits) { return bf16_to_f32(bits); }

// Lane i of the result: the sum of v[i]'s 8 lanes. Three rounds of pairing lanes of two vectors
// (21 shuffles and adds for 8 sums, where summing each alone is 7 dependent adds).
inline __attribute__((always_inline)) Vec8 sum_lanes(const Vec8 v[8]) {
  Vec8 p[4], r[2];
  for (int i = 0; i < 4; ++i) {  // [a0+a1, b0+b1, a2+a3, b2+b3, ...] of v[2i] = a, v[2i+1] = b
    p[i] = __builtin_shufflevector(v[2 * i], v[2 * i + 1], 0, 8, 2, 10, 4, 12, 6, 14) +
           __builtin_shufflevector(v[2 * i], v[2 * i + 1], 1, 9, 3, 11, 5, 13, 7, 15);
  }
  for (int i = 0; i < 2; ++i) {  // 4 vectors' halves-of-quarters: [a0-3, b0-3, c0-3, d0-3, a4-7, ...]
    r[i] = __builtin_shufflevector(p[2 * i], p[2 * i + 1], 0, 1, 8, 9, 4, 5, 12, 13) +
           __builtin_shufflevector(p[2 * i], p[2 * i + 1], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  return __builtin_shufflevector(r[0], r[1], 0, 1, 2, 3, 8, 9, 10, 11) +
         __builtin_shufflevector(r[0], r[1], 4, 5, 6, 7, 12, 13, 14, 15);
}

// q · k over D values for 8 keys `stride` apart, for G query heads at once (q: G rows D apart,
// sharing the keys: each key vector is loaded once for the G of them): 8 independent sums per head
// over the head dim 8 values at a time, then their lanes summed together; the head dim's last
// D % 8 values one by one. A head's sums are the same whatever G is.
template <int G, typename T>
inline __attribute__((always_inline)) void dot8(const float* q, const T* k, int64_t stride, int64_t D, Vec8 sums[G]) {
  Vec8 acc[G][8] = {};
  int64_t d = 0;
  for (; d + 8 <= D; d += 8) {
    Vec8 qv[G];
    for (int g = 0; g < G; ++g) qv[g] = load8(q + g * D + d);
    for (int i = 0; i < 8; ++i) {
      const Vec8 kv = load8(k + i * stride + d);
      for (int g = 0; g < G; ++g) acc[g][i] += qv[g] * kv;
    }
  }
  for (int g = 0; g < G; ++g) sums[g] = sum_lanes(acc[g]);
  for (; d < D; ++d) {
    for (int g = 0; g < G; ++g) {
      for (int i = 0; i < 8; ++i) sums[g][i] += q[g * D + d] * value_of(k[i * stride + d]);
    }
  }
}

// q · k over D values for one key.
template <typename T>
inline __attribute__((always_inline)) float dot1(const float* q, const T* k, int64_t D) {
  Vec8 acc = {};
  int64_t d = 0;
  for (; d + 8 <= D; d += 8) acc += load8(q + d) * load8(k + d);
  float sum = 0.0f;
  for (int i = 0; i < 8; ++i) sum += acc[i];
  for (; d < D; ++d) sum += q[d] * value_of(k[d]);
  return sum;
}

// out_g[0, 8N) = Σ_j p_g[j] · v_j[0, 8N) for G heads (p: G rows `p_stride` apart, out: G rows D
// apart) over the sequence's keys (values `D` apart within a page, `value_page(j)` the page of key
// j's): N vectors of sums per head in registers, each value vector loaded once for the G heads and
// added to all of their sums (N independent chains per head, not one per 8 values).
template <int G, int N, typename ValuePage>
inline __attribute__((always_inline)) void weighted_values(const float* p, int64_t p_stride, int64_t keys, int64_t P,
                                                           int64_t D, ValuePage value_page, float* out) {
  Vec8 acc[G][N] = {};
  for (int64_t j0 = 0; j0 < keys; j0 += P) {
    const auto* v = value_page(j0);
    for (int64_t j = j0; j < std::min(keys, j0 + P); ++j, v += D) {
      for (int i = 0; i < N; ++i) {
        const Vec8 vv = load8(v + 8 * i);
        for (int g = 0; g < G; ++g) acc[g][i] += p[g * p_stride + j] * vv;
      }
    }
  }
  for (int g = 0; g < G; ++g) std::memcpy(out + g * D, acc[g], sizeof(acc[g]));
}

// e^x for x ≤ 0 (scores minus their maximum), within 2 ulp: 2^n · p(r) with r = x - n·ln 2 in
// [-ln 2 / 2, ln 2 / 2] and p Cephes' degree-6 polynomial; below -87 it is 0 (as expf underflows).
// Plain arithmetic and a branch-free select, so the loop over a row vectorizes.
inline __attribute__((always_inline)) void exp_row(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::max(x[i], -87.0f);
    const float k = std::nearbyint(v * 1.44269504088896341f);
    const float r = (v - k * 0.693359375f) + k * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, 4);
    x[i] = x[i] < -87.0f ? 0.0f : p * scale;
  }
}

// G query heads of one token that share a KV head (q, o: G rows D apart; scores: G rows
// `score_stride` apart): out = softmax(q · keysᵀ · scale) · values over its `keys` cached
// positions, read as bf16 (the pages) or as fp32 (their copy, attention()): the same sums either
// way, and for any G (each key and value is loaded once for the G heads; a head's arithmetic is
// its own).
template <int G, typename T>
inline __attribute__((always_inline)) void attend_heads(const shape::attention& s, const float* q, const T* base,
                                                        const KvLayout& layout, const int32_t* pages, int64_t kvh,
                                                        int64_t keys, float* scores, int64_t score_stride, float* o) {
  const int64_t D = layout.head_dim, P = layout.page_size;
  // A page holds each head's keys (and values) contiguously: walk pages, not slots; 8 keys of a
  // page at a time, then its last ones alone.
  for (int64_t j0 = 0; j0 < keys; j0 += P) {
    const T* k = base + layout.vec(pages[j0 / P], 0, kvh, 0);
    const int64_t end = std::min(keys, j0 + P);
    int64_t j = j0;
    for (; j + 8 <= end; j += 8, k += 8 * D) {
      Vec8 sums[G];
      dot8<G>(q, k, D, D, sums);
      for (int g = 0; g < G; ++g) {
        const Vec8 scaled = sums[g] * s.scale;
        std::memcpy(scores + g * score_stride + j, &scaled, sizeof(scaled));
      }
    }
    for (; j < end; ++j, k += D) {
      for (int g = 0; g < G; ++g) scores[g * score_stride + j] = dot1(q + g * D, k, D) * s.scale;
    }
  }
  for (int g = 0; g < G; ++g) {
    float* row = scores + g * score_stride;
    float max_score = -INFINITY;
    for (int64_t j = 0; j < keys; ++j) max_score = std::max(max_score, row[j]);
    for (int64_t j = 0; j < keys; ++j) row[j] -= max_score;
    exp_row(row, keys);
    float denom = 0.0f;
    for (int64_t j = 0; j < keys; ++j) denom += row[j];
    const float inv = 1.0f / denom;
    for (int64_t j = 0; j < keys; ++j) row[j] *= inv;
  }
  // The values 64 of the head dim at a time (8 vectors of sums a head), then 8 at a time, then one
  // by one.
  const auto value_page = [&](int64_t d0) {
    return [=, &layout](int64_t j0) { return base + layout.vec(pages[j0 / P], 1, kvh, 0) + d0; };
  };
  int64_t d0 = 0;
  for (; d0 + 64 <= D; d0 += 64) weighted_values<G, 8>(scores, score_stride, keys, P, D, value_page(d0), o + d0);
  for (; d0 + 8 <= D; d0 += 8) weighted_values<G, 1>(scores, score_stride, keys, P, D, value_page(d0), o + d0);
  for (; d0 < D; ++d0) {
    for (int g = 0; g < G; ++g) {
      float acc = 0.0f;
      for (int64_t j = 0; j < keys; ++j) {
        acc += scores[g * score_stride + j] * value_of(base[layout.vec(pages[j / P], 1, kvh, j % P) + d0]);
      }
      o[g * D + d0] = acc;
    }
  }
}

// attend_heads for 1 to kMaxHeads heads and each element type, compiled for AVX-512, AVX2 and the
// baseline, the loader picking the one this processor runs (GCC's target_clones): the same sums
// in each.
constexpr int kMaxHeads = 3;  // heads sharing their KV head's loads: 3 × 8 vectors of sums

#if defined(__x86_64__) && !defined(__clang__)
#define KILN_ATTENTION_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KILN_ATTENTION_CLONES
#endif
template <typename T>
inline __attribute__((always_inline)) void attend_n(int n, const shape::attention& s, const float* q, const T* base,
                                                    const KvLayout& layout, const int32_t* pages, int64_t kvh,
                                                    int64_t keys, float* scores, int64_t score_stride, float* o) {
  switch (n) {
    case 1: return attend_heads<1>(s, q, base, layout, pages, kvh, keys, scores, score_stride, o);
    case 2: return attend_heads<2>(s, q, base, layout, pages, kvh, keys, scores, score_stride, o);
    default: return attend_heads<3>(s, q, base, layout, pages, kvh, keys, scores, score_stride, o);
  }
  static_assert(kMaxHeads == 3, "the switch above takes 1..3 heads");
}
KILN_ATTENTION_CLONES void attend(int n, const shape::attention& s, const float* q, const uint16_t* base,
                                  const KvLayout& layout, const int32_t* pages, int64_t kvh, int64_t keys,
                                  float* scores, int64_t score_stride, float* o) {
  attend_n(n, s, q, base, layout, pages, kvh, keys, scores, score_stride, o);
}
KILN_ATTENTION_CLONES void attend(int n, const shape::attention& s, const float* q, const float* base,
                                  const KvLayout& layout, const int32_t* pages, int64_t kvh, int64_t keys,
                                  float* scores, int64_t score_stride, float* o) {
  attend_n(n, s, q, base, layout, pages, kvh, keys, scores, score_stride, o);
}

}  // namespace

void attention(const shape::attention& s, const float* q_rows, const uint16_t* base, const KvLayout& layout,
               float* out, const StepBatch& step) {
  const int64_t D = s.head_dim, heads = s.heads;
  const int64_t group = heads / s.kv_heads;
  // A sequence with several queries in this step (a prompt's chunk) reads each key and value many
  // times: they are widened to fp32 once, into one page of all its keys, which halves the work of
  // the dot products (a bf16 value takes a load, a widening and a shift). The values are the same.
  static thread_local std::vector<float> widened;
  const int32_t one_page[1] = {0};
  for (int64_t seq = 0; seq < step.num_seqs(); ++seq) {
    const int32_t* pages = step.block_tables.data() + seq * step.max_pages_per_seq;
    const int64_t first = step.query_start[seq], queries = step.query_start[seq + 1] - first;
    int64_t max_keys = 0;
    for (int64_t t = first; t < first + queries; ++t) max_keys = std::max<int64_t>(max_keys, step.positions[t] + 1);
    const bool widen = queries >= kWidenQueries;
    const KvLayout all_keys{s.kv_heads, static_cast<int>(D), static_cast<int>(max_keys)};
    float* wide = nullptr;  // the pool's threads have their own thread_local vectors: they get this one's
    if (widen) {
      if (static_cast<int64_t>(widened.size()) < 2 * s.kv_heads * max_keys * D) widened.resize(2 * s.kv_heads * max_keys * D);
      wide = widened.data();
      parallel_for(2 * s.kv_heads * max_keys, 64, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {  // i: (kv, head, key)
          const int kv = static_cast<int>(i / (s.kv_heads * max_keys)), h = static_cast<int>(i / max_keys % s.kv_heads);
          const int64_t j = i % max_keys;
          const uint16_t* from = base + layout.vec(pages[j / s.page_size], kv, h, static_cast<int>(j % s.page_size));
          float* to = wide + all_keys.vec(0, kv, h, static_cast<int>(j));
          for (int64_t d = 0; d < D; ++d) to[d] = bf16_to_f32(from[d]);
        }
      });
    }
    // Work items: a token's query heads of one KV head in `parts` runs of at most kMaxHeads
    // (4 heads: 2 + 2; 8: 3 + 3 + 2).
    const int64_t parts = (group + kMaxHeads - 1) / kMaxHeads;
    parallel_for(queries * s.kv_heads * parts, 1, [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> scores;
      for (int64_t item = begin; item < end; ++item) {
        const int64_t t = first + item / (s.kv_heads * parts), kvh = item / parts % s.kv_heads, part = item % parts;
        const int64_t h = kvh * group + part * (group / parts) + std::min(part, group % parts);
        const int n = static_cast<int>(group / parts + (part < group % parts ? 1 : 0));
        const int64_t keys = static_cast<int64_t>(step.positions[t]) + 1;  // causal: positions 0..pos
        if (static_cast<int64_t>(scores.size()) < n * keys) scores.resize(n * keys);
        float* o = out + t * heads * D + h * D;
        const float* q = q_rows + t * s.row + h * D;
        if (widen) {
          attend(n, s, q, wide, all_keys, one_page, kvh, keys, scores.data(), keys, o);
        } else {
          attend(n, s, q, base, layout, pages, kvh, keys, scores.data(), keys, o);
        }
      }
    });
  }
}

}  // namespace kiln::cpu
