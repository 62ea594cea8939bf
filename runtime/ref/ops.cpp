#include "runtime/ref/ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/core/dtype.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/parallel.hpp"
#include "runtime/cpu/attention.hpp"
#include "runtime/cpu/bf16_pack.hpp"
#include "runtime/cpu/linear.hpp"
#include "runtime/model/model_def.hpp"
#include "runtime/weights/float_convert.hpp"
#include "runtime/weights/quant_repack.hpp"

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

namespace {

// out[r] = x[r] / sqrt(mean(x[r]²) + eps) · weight over `rows` rows of strides x_stride / out_stride.
void rmsnorm_strided(const float* x, int64_t x_stride, const float* weight, float* out, int64_t out_stride,
                     int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* o = out + r * out_stride;
    const float s = rms_scale(xr, dim, eps);
    for (int64_t i = 0; i < dim; ++i) o[i] = xr[i] * s * weight[i];
  }
}

}  // namespace

void embed(const shape::embed& s, const int32_t* token_ids, CpuMatrix table, float* x, int32_t rank, int64_t tokens) {
  const int64_t first = static_cast<int64_t>(rank) * s.vocab;  // this rank's rows of the whole vocabulary
  const auto* bytes = static_cast<const std::byte*>(table.data);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t id = token_ids[t];
    if (id < 0) fail("token id ", id, " at row ", t, " is negative");
    float* row = x + t * s.dim;
    if (id < first || id >= first + s.vocab) {
      std::fill(row, row + s.dim, 0.0f);  // another rank's token: its rows are summed in after
      continue;
    }
    const int64_t r = id - first;
    switch (table.format) {
      case MatrixFormat::f32:
        std::memcpy(row, static_cast<const float*>(table.data) + r * s.dim, sizeof(float) * s.dim);
        break;
      case MatrixFormat::bf16:
        bf16_elements_to_f32(bytes + r * s.dim * 2, std::span<float>(row, static_cast<size_t>(s.dim)));
        break;
      case MatrixFormat::bf16_packed: {  // the fast CPU backend's, as a tied LM head reads it
        thread_local std::vector<uint16_t> bits;
        bits.resize(static_cast<size_t>(s.dim));
        unpack_bf16_row(bytes, s.vocab, s.dim, r, bits.data());
        bf16_elements_to_f32(reinterpret_cast<const std::byte*>(bits.data()), std::span<float>(row, bits.size()));
        break;
      }
      default:  // the fast CPU backend's blocks (a GGUF file's table, as the tied LM head reads it)
        if (!is_cpu_block_format(table.format)) {
          fail("internal: a ", static_cast<int>(table.format), " embedding table on the CPU (a GPU format)");
        }
        for (int64_t c = 0; c < s.dim; ++c) row[c] = cpu_matrix_value(table.format, bytes, s.dim, r, c);
    }
  }
}

void rmsnorm(const shape::rmsnorm& s, const float* x, const float* weight, float* out, int64_t rows) {
  rmsnorm_strided(x, s.dim, weight, out, s.dim, rows, s.dim, s.eps);
}

void rmsnorm_rows(const shape::rmsnorm_rows& s, const float* x, const int32_t* logit_rows, const float* weight,
                  float* out, int64_t num_rows) {
  for (int64_t r = 0; r < num_rows; ++r) {
    rmsnorm_strided(x + logit_rows[r] * static_cast<int64_t>(s.dim), s.dim, weight, out + r * s.dim, s.dim, 1, s.dim,
                    s.eps);
  }
}

void rmsnorm_inplace(const shape::rmsnorm_inplace& s, float* rows, const float* weight, int64_t tokens) {
  rmsnorm_strided(rows, s.row, weight, rows, s.row, tokens, s.dim, s.eps);
}

void linear(const shape::linear& s, const float* in, const float* weight, float* out, int64_t tokens) {
  const int64_t n = s.n, k = s.k;
  const bool accumulate = s.out == LinearOut::add_f32;
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

void linear(const shape::linear& s, const float* in, CpuMatrix weight, float* out, int64_t tokens) {
  if (weight.format == MatrixFormat::f32) return linear(s, in, static_cast<const float*>(weight.data), out, tokens);
  cpu::linear(s, in, weight, out, tokens);
}

void head_rmsnorm(const shape::head_rmsnorm& s, float* qkv, const float* q_norm, const float* k_norm, int64_t tokens) {
  for (int64_t t = 0; t < tokens; ++t) {
    float* q = qkv + t * s.row;
    rmsnorm_strided(q, s.head_dim, q_norm, q, s.head_dim, s.heads, s.head_dim, s.eps);
    float* k = q + static_cast<int64_t>(s.heads) * s.head_dim;
    rmsnorm_strided(k, s.head_dim, k_norm, k, s.head_dim, s.kv_heads, s.head_dim, s.eps);
  }
}

void rope(const shape::rope& s, float* rows, const int32_t* positions, const float* table, int64_t tokens) {
  const int64_t half = s.rotary_dim / 2;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* cs = table + static_cast<int64_t>(positions[t]) * s.rotary_dim;
    for (int64_t h = 0; h < s.heads; ++h) {
      float* v = rows + t * s.row + s.offset + h * s.head_stride;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[2 * i], sn = cs[2 * i + 1];
        float& a = s.interleaved ? v[2 * i] : v[i];
        float& b = s.interleaved ? v[2 * i + 1] : v[i + half];
        const float a0 = a, b0 = b;
        a = a0 * c - b0 * sn;
        b = b0 * c + a0 * sn;
      }
    }
  }
}

KvPages kv_layer(const RefContext& ctx, int64_t offset, const KvLayout& layout) {
  if (ctx.kv_bf16) return KvPages{nullptr, layout, reinterpret_cast<uint16_t*>(ctx.kv_cache) + offset};
  return KvPages{ctx.kv_cache + offset, layout};
}

void kv_write(const shape::kv_write& s, const float* qkv, const int32_t* slot_mapping, const KvPages& cache,
              int64_t tokens) {
  const int64_t D = s.head_dim;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t page = slot_mapping[t] / s.page_size, off = slot_mapping[t] % s.page_size;
    for (int64_t h = 0; h < s.kv_heads; ++h) {
      const float* k = qkv + t * s.row + s.k_offset + h * D;
      const float* v = qkv + t * s.row + s.v_offset + h * D;
      if (cache.bf16 != nullptr) {
        uint16_t* k_out = cache.bf16 + cache.layout.vec(page, 0, h, off);
        uint16_t* v_out = cache.bf16 + cache.layout.vec(page, 1, h, off);
        for (int64_t d = 0; d < D; ++d) k_out[d] = f32_to_bf16(k[d]), v_out[d] = f32_to_bf16(v[d]);
      } else {
        std::memcpy(cache.k(page, h, off), k, sizeof(float) * D);
        std::memcpy(cache.v(page, h, off), v, sizeof(float) * D);
      }
    }
  }
}

void attention(const shape::attention& s, const float* q_rows, const KvPages& cache, float* out, const StepBatch& step,
               bool fast_kernels) {
  if ((cache.bf16 != nullptr) != fast_kernels) {
    fail("internal: attention over ", cache.bf16 != nullptr ? "bf16" : "fp32", " KV pages needs the ",
         cache.bf16 != nullptr ? "fast CPU backend's kernel" : "reference's");
  }
  if (fast_kernels) return cpu::attention(s, q_rows, cache.bf16, cache.layout, out, step);
  const int64_t D = s.head_dim, P = s.page_size, heads = s.heads;
  const int64_t group = heads / s.kv_heads;
  for (int64_t seq = 0; seq < step.num_seqs(); ++seq) {
    const int32_t* pages = step.block_tables.data() + seq * step.max_pages_per_seq;
    parallel_for(static_cast<int64_t>(step.query_start[seq + 1] - step.query_start[seq]) * heads, 4,
                 [&](int64_t begin, int64_t end) {
      std::vector<float> scores;
      for (int64_t item = begin; item < end; ++item) {
        const int64_t t = step.query_start[seq] + item / heads, h = item % heads, kvh = h / group;
        const float* q = q_rows + t * s.row + h * D;
        const int64_t keys = static_cast<int64_t>(step.positions[t]) + 1;  // causal: positions 0..pos
        scores.resize(keys);
        float max_score = -INFINITY;
        for (int64_t j = 0; j < keys; ++j) {
          scores[j] = dot(q, cache.k(pages[j / P], kvh, j % P), D) * s.scale;
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

void silu_mul(const shape::silu_mul& s, const float* gate_up, float* act, int64_t rows) {
  const int64_t dim = s.dim;
  for (int64_t t = 0; t < rows; ++t) {
    const float* g = gate_up + t * 2 * dim;
    const float* u = g + dim;
    float* a = act + t * dim;
    for (int64_t i = 0; i < dim; ++i) a[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

}  // namespace kiln::ref
