#include "runtime/ref/mla.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/core/parallel.hpp"

namespace kiln::ref {

void mla_kv_write(const shape::mla_kv_write& s, const float* kv_a, const int32_t* slot_mapping,
                  const LatentPages& cache, int64_t tokens) {
  const int64_t width = s.latent + s.rope;
  for (int64_t t = 0; t < tokens; ++t) {
    std::memcpy(cache.row(slot_mapping[t]), kv_a + t * width, sizeof(float) * width);
  }
}

void mla_q_absorb(const shape::mla_q_absorb& s, const float* q, const float* w_uk, float* q_mla, int64_t tokens) {
  const int64_t heads = s.heads, nope = s.nope, rope = s.rope, latent = s.latent;
  const int64_t q_head = nope + rope, out_head = latent + rope;
  parallel_for(tokens * heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / heads, h = item % heads;
      const float* qh = q + (t * heads + h) * q_head;
      float* out = q_mla + (t * heads + h) * out_head;
      std::fill(out, out + latent, 0.0f);
      for (int64_t d = 0; d < nope; ++d) {  // out += q[d] · W_UK[h, d, :]
        const float* w = w_uk + (h * nope + d) * latent;
        for (int64_t c = 0; c < latent; ++c) out[c] += qh[d] * w[c];
      }
      std::memcpy(out + latent, qh + nope, sizeof(float) * rope);
    }
  });
}

void mla_attention(const shape::mla_attention& s, const float* q_mla, const LatentPages& cache, float* o_lat,
                   const StepBatch& step) {
  const int64_t heads = s.heads, latent = s.latent, width = s.latent + s.rope, P = s.page_size;
  const float scale = s.scale;
  for (int64_t seq = 0; seq < step.num_seqs(); ++seq) {
    const int32_t* pages = step.block_tables.data() + seq * step.max_pages_per_seq;
    parallel_for(static_cast<int64_t>(step.query_start[seq + 1] - step.query_start[seq]) * heads, 1,
                 [&](int64_t begin, int64_t end) {
      std::vector<float> p;
      for (int64_t item = begin; item < end; ++item) {
        const int64_t t = step.query_start[seq] + item / heads, h = item % heads;
        const float* qh = q_mla + (t * heads + h) * width;
        const int64_t keys = static_cast<int64_t>(step.positions[t]) + 1;
        p.resize(keys);
        float max_score = -INFINITY;
        for (int64_t j = 0; j < keys; ++j) {
          const float* kv = cache.row(static_cast<int64_t>(pages[j / P]) * P + j % P);
          double dot = 0;
          for (int64_t c = 0; c < width; ++c) dot += static_cast<double>(qh[c]) * kv[c];
          p[j] = static_cast<float>(dot) * scale;
          max_score = std::max(max_score, p[j]);
        }
        float denom = 0;
        for (int64_t j = 0; j < keys; ++j) denom += (p[j] = std::exp(p[j] - max_score));
        float* out = o_lat + (t * heads + h) * latent;
        std::fill(out, out + latent, 0.0f);
        for (int64_t j = 0; j < keys; ++j) {
          const float* kv = cache.row(static_cast<int64_t>(pages[j / P]) * P + j % P);
          const float w = p[j] / denom;
          for (int64_t c = 0; c < latent; ++c) out[c] += w * kv[c];
        }
      }
    });
  }
}

void mla_v_up(const shape::mla_v_up& s, const float* o_lat, const float* w_uv, float* out, int64_t tokens) {
  const int64_t heads = s.heads, latent = s.latent, v = s.v;
  parallel_for(tokens * heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / heads, h = item % heads;
      const float* o = o_lat + (t * heads + h) * latent;
      for (int64_t e = 0; e < v; ++e) {
        const float* w = w_uv + (h * v + e) * latent;
        double acc = 0;
        for (int64_t c = 0; c < latent; ++c) acc += static_cast<double>(w[c]) * o[c];
        out[(t * heads + h) * v + e] = static_cast<float>(acc);
      }
    }
  });
}

}  // namespace kiln::ref
