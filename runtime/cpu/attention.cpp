#include "runtime/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/core/dtype.hpp"
#include "runtime/core/parallel.hpp"

namespace kiln::cpu {

namespace {

// 16 floats as one value of GCC's / Clang's vector extension: the arithmetic below is 4 SSE (or
// 1 AVX-512) operations each, with no intrinsics to pick per instruction set.
typedef float Vec16 __attribute__((vector_size(64)));
typedef uint16_t Bf16x16 __attribute__((vector_size(32)));
typedef uint32_t U32x16 __attribute__((vector_size(64)));

Vec16 load16(const float* p) {
  Vec16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// 16 bf16 values as floats: a bf16 is the high half of a float's bits.
Vec16 load16(const uint16_t* p) {
  Bf16x16 h;
  std::memcpy(&h, p, sizeof(h));
  const U32x16 bits = __builtin_convertvector(h, U32x16) << 16;
  Vec16 v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

float sum16(Vec16 v) {
  float sum = 0.0f;
  for (int i = 0; i < 16; ++i) sum += v[i];
  return sum;
}

// q · k over n values: 16 at a time, then the rest one by one.
inline __attribute__((always_inline)) float dot(const float* q, const uint16_t* k, int64_t n) {
  Vec16 acc = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc += load16(q + i) * load16(k + i);
  float sum = sum16(acc);
  for (; i < n; ++i) sum += q[i] * bf16_to_f32(k[i]);
  return sum;
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

// One query head of one token: out = softmax(q · keysᵀ · scale) · values over its `keys` cached
// positions. Compiled for AVX-512, AVX2 and the baseline, the loader picking the one this
// processor runs (GCC's / Clang's target_clones): the same sums in each, per (token, head).
#if defined(__x86_64__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void attend(const shape::attention& s, const float* q, const uint16_t* base, const KvLayout& layout,
            const int32_t* pages, int64_t kvh, int64_t keys, float* scores, float* o) {
  const int64_t D = s.head_dim, P = s.page_size;
  // A page holds each head's keys (and values) contiguously: walk pages, not slots.
  float max_score = -INFINITY;
  for (int64_t j0 = 0; j0 < keys; j0 += P) {
    const uint16_t* k = base + layout.vec(pages[j0 / P], 0, kvh, 0);
    for (int64_t j = j0; j < std::min(keys, j0 + P); ++j, k += D) {
      scores[j] = dot(q, k, D) * s.scale;
      max_score = std::max(max_score, scores[j]);
    }
  }
  for (int64_t j = 0; j < keys; ++j) scores[j] -= max_score;
  exp_row(scores, keys);
  float denom = 0.0f;
  for (int64_t j = 0; j < keys; ++j) denom += scores[j];
  const float inv = 1.0f / denom;
  for (int64_t j = 0; j < keys; ++j) scores[j] *= inv;
  // 16 output values at a time, summed over every key in registers (not through memory); then the
  // head dim's last values (when it is not a multiple of 16) one by one.
  int64_t d0 = 0;
  for (; d0 + 16 <= D; d0 += 16) {
    Vec16 acc = {};
    for (int64_t j0 = 0; j0 < keys; j0 += P) {
      const uint16_t* v = base + layout.vec(pages[j0 / P], 1, kvh, 0) + d0;
      for (int64_t j = j0; j < std::min(keys, j0 + P); ++j, v += D) acc += scores[j] * load16(v);
    }
    std::memcpy(o + d0, &acc, sizeof(acc));
  }
  for (; d0 < D; ++d0) {
    float acc = 0.0f;
    for (int64_t j = 0; j < keys; ++j) acc += scores[j] * bf16_to_f32(base[layout.vec(pages[j / P], 1, kvh, j % P) + d0]);
    o[d0] = acc;
  }
}

}  // namespace

void attention(const shape::attention& s, const float* q_rows, const uint16_t* base, const KvLayout& layout,
               float* out, const StepBatch& step) {
  const int64_t D = s.head_dim, heads = s.heads;
  const int64_t group = heads / s.kv_heads;
  for (int64_t seq = 0; seq < step.num_seqs(); ++seq) {
    const int32_t* pages = step.block_tables.data() + seq * step.max_pages_per_seq;
    parallel_for(static_cast<int64_t>(step.query_start[seq + 1] - step.query_start[seq]) * heads, 2,
                 [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> scores;
      for (int64_t item = begin; item < end; ++item) {
        const int64_t t = step.query_start[seq] + item / heads, h = item % heads;
        const int64_t keys = static_cast<int64_t>(step.positions[t]) + 1;  // causal: positions 0..pos
        if (static_cast<int64_t>(scores.size()) < keys) scores.resize(keys);
        attend(s, q_rows + t * s.row + h * D, base, layout, pages, h / group, keys, scores.data(),
               out + t * heads * D + h * D);
      }
    });
  }
}

}  // namespace kiln::cpu
