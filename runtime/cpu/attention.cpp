#include "runtime/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/parallel.hpp"

namespace kiln::cpu {

namespace {

// 16 floats as one value of GCC's / Clang's vector extension: the arithmetic below is 4 SSE (or
// 1 AVX-512) operations each, with no intrinsics to pick per instruction set.
typedef float Vec16 __attribute__((vector_size(64)));

Vec16 load16(const float* p) {
  Vec16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

float sum16(Vec16 v) {
  float sum = 0.0f;
  for (int i = 0; i < 16; ++i) sum += v[i];
  return sum;
}

// n a multiple of 16 (attention() checks the head dim).
inline __attribute__((always_inline)) float dot(const float* a, const float* b, int64_t n) {
  Vec16 acc = {};
  for (int64_t i = 0; i < n; i += 16) acc += load16(a + i) * load16(b + i);
  return sum16(acc);
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
void attend(const shape::attention& s, const float* q, const float* base, const KvLayout& layout, const int32_t* pages,
            int64_t kvh, int64_t keys, float* scores, float* o) {
  const int64_t D = s.head_dim, P = s.page_size;
  // A page holds each head's keys (and values) contiguously: walk pages, not slots.
  float max_score = -INFINITY;
  for (int64_t j0 = 0; j0 < keys; j0 += P) {
    const float* k = base + layout.vec(pages[j0 / P], 0, kvh, 0);
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
  // 16 output values at a time, summed over every key in registers (not through memory).
  for (int64_t d0 = 0; d0 < D; d0 += 16) {
    Vec16 acc = {};
    for (int64_t j0 = 0; j0 < keys; j0 += P) {
      const float* v = base + layout.vec(pages[j0 / P], 1, kvh, 0) + d0;
      for (int64_t j = j0; j < std::min(keys, j0 + P); ++j, v += D) acc += scores[j] * load16(v);
    }
    std::memcpy(o + d0, &acc, sizeof(acc));
  }
}

}  // namespace

void attention(const shape::attention& s, const float* q_rows, const float* base, const KvLayout& layout, float* out,
               const StepBatch& step) {
  const int64_t D = s.head_dim, heads = s.heads;
  if (D % 16 != 0) fail("internal: the fast CPU attention takes head dims of whole 16s, not ", D);
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
