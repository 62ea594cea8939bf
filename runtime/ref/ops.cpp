#include "runtime/ref/ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/parallel.hpp"

namespace kiln::ref {

namespace {

// Eight independent partial sums: the compiler vectorizes this, and the rounding error grows
// like a pairwise sum's rather than a serial one's.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (; i < n; ++i) acc[i & 7] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

inline float rms_scale(const float* x, int64_t dim, float eps) {
  return 1.0f / std::sqrt(dot(x, x, dim) / static_cast<float>(dim) + eps);
}

}  // namespace

void embed(const int32_t* token_ids, int64_t tokens, const float* table, int64_t vocab, int64_t dim, float* x) {
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t id = token_ids[t];
    if (id < 0 || id >= vocab) fail("token id ", id, " at row ", t, " is outside the vocabulary (0..", vocab - 1, ")");
    std::memcpy(x + t * dim, table + static_cast<int64_t>(id) * dim, sizeof(float) * dim);
  }
}

void rmsnorm(const float* x, int64_t x_stride, const float* weight, float* out, int64_t out_stride, int64_t rows,
             int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* o = out + r * out_stride;
    const float s = rms_scale(xr, dim, eps);
    for (int64_t i = 0; i < dim; ++i) o[i] = xr[i] * s * weight[i];
  }
}

void rmsnorm_rows(const float* x, const int32_t* rows, int64_t num_rows, const float* weight, float* out, int64_t dim,
                  float eps) {
  for (int64_t r = 0; r < num_rows; ++r) rmsnorm(x + rows[r] * dim, dim, weight, out + r * dim, dim, 1, dim, eps);
}

void linear(const float* in, int64_t tokens, const float* weight, int64_t n, int64_t k, float* out, bool accumulate) {
  // Each weight row is read once and applied to every token while it is in cache.
  parallel_for(n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      const float* w = weight + j * k;
      for (int64_t t = 0; t < tokens; ++t) {
        const float v = dot(in + t * k, w, k);
        float& o = out[t * n + j];
        o = accumulate ? o + v : v;
      }
    }
  });
}

void head_rmsnorm(float* rows, int64_t tokens, int64_t row_stride, int64_t offset, int64_t heads, int64_t head_dim,
                  const float* weight, float eps) {
  for (int64_t t = 0; t < tokens; ++t) {
    float* base = rows + t * row_stride + offset;
    rmsnorm(base, head_dim, weight, base, head_dim, heads, head_dim, eps);
  }
}

void rope(float* rows, int64_t tokens, int64_t row_stride, int64_t offset, int64_t heads, int64_t head_stride,
          int64_t rotary_dim, bool interleaved, const int32_t* positions, const float* table) {
  const int64_t half = rotary_dim / 2;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* cs = table + static_cast<int64_t>(positions[t]) * rotary_dim;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = rows + t * row_stride + offset + h * head_stride;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        float& a = interleaved ? v[2 * i] : v[i];
        float& b = interleaved ? v[2 * i + 1] : v[i + half];
        const float a0 = a, b0 = b;
        a = a0 * c - b0 * s;
        b = b0 * c + a0 * s;
      }
    }
  }
}

void kv_write(const float* rows, int64_t tokens, int64_t row_stride, int64_t k_offset, int64_t v_offset,
              const int32_t* slot_mapping, const KvPages& cache) {
  const int64_t D = cache.head_dim;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t page = slot_mapping[t] / cache.page_size, off = slot_mapping[t] % cache.page_size;
    for (int64_t h = 0; h < cache.kv_heads; ++h) {
      std::memcpy(cache.k(page, h, off), rows + t * row_stride + k_offset + h * D, sizeof(float) * D);
      std::memcpy(cache.v(page, h, off), rows + t * row_stride + v_offset + h * D, sizeof(float) * D);
    }
  }
}

void attention(const float* rows, int64_t row_stride, int64_t heads, float scale, const StepBatch& step,
               const KvPages& cache, float* out) {
  const int64_t D = cache.head_dim, P = cache.page_size;
  const int64_t group = heads / cache.kv_heads;
  for (int64_t s = 0; s < step.num_seqs(); ++s) {
    const int32_t* pages = step.block_tables.data() + s * step.max_pages_per_seq;
    parallel_for(static_cast<int64_t>(step.query_start[s + 1] - step.query_start[s]) * heads, 4,
                 [&](int64_t begin, int64_t end) {
      std::vector<float> scores;
      for (int64_t item = begin; item < end; ++item) {
        const int64_t t = step.query_start[s] + item / heads, h = item % heads, kvh = h / group;
        const float* q = rows + t * row_stride + h * D;
        const int64_t keys = static_cast<int64_t>(step.positions[t]) + 1;  // causal: positions 0..pos
        scores.resize(keys);
        float max_score = -INFINITY;
        for (int64_t j = 0; j < keys; ++j) {
          scores[j] = dot(q, cache.k(pages[j / P], kvh, j % P), D) * scale;
          max_score = std::max(max_score, scores[j]);
        }
        float denom = 0;
        for (int64_t j = 0; j < keys; ++j) denom += (scores[j] = std::exp(scores[j] - max_score));
        float* o = out + t * heads * D + h * D;
        std::fill(o, o + D, 0.0f);
        for (int64_t j = 0; j < keys; ++j) {
          const float p = scores[j] / denom;
          const float* v = cache.v(pages[j / P], kvh, j % P);
          for (int64_t d = 0; d < D; ++d) o[d] += p * v[d];
        }
      }
    });
  }
}

void silu_mul(const float* gate_up, int64_t tokens, int64_t dim, float* act) {
  for (int64_t t = 0; t < tokens; ++t) {
    const float* g = gate_up + t * 2 * dim;
    const float* u = g + dim;
    float* a = act + t * dim;
    for (int64_t i = 0; i < dim; ++i) a[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

}  // namespace kiln::ref
