#include "runtime/cpu/linear.hpp"

#include <algorithm>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/parallel.hpp"
#include "runtime/cpu/quant_dot.hpp"

namespace kiln::cpu {

namespace {

// Rows go to the threads in tiles of this many (a multiple of every kernel's row tile).
constexpr int64_t kRowTile = 16;
// Tokens a thread's rows take at a time: a chunk's quantized activations (320 bytes per 64
// values: 480 KB for 64 tokens of 1,536) stay in L2 while the rows stream past them.
constexpr int64_t kTokenChunk = 64;

}  // namespace

void linear(const shape::linear& s, const float* in, CpuMatrix weight, float* out, int64_t tokens) {
  const int64_t n = s.n, k = s.k;
  const bool blocks = is_block_format(weight.format);
  if ((!blocks && weight.format != MatrixFormat::bf16) || (blocks && k % kQuantBlockValues != 0)) {
    fail("internal: the fast CPU linear has no kernel for a ", static_cast<int>(weight.format), " matrix of [", n,
         ", ", k, "]");
  }
  // The step's quantized activations: grown once, reused by every later call on this thread.
  thread_local std::vector<Q8Pair> quantized;
  const void* x = in;
  int64_t x_stride = k;  // per token: floats, or Q8Pair pairs
  if (blocks) {
    x_stride = activation_pairs(k);
    if (static_cast<int64_t>(quantized.size()) < tokens * x_stride) quantized.resize(tokens * x_stride);
    Q8Pair* q = quantized.data();
    parallel_for(tokens, 8, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) quantize_activations(in + t * k, k, q + t * x_stride);
    });
    x = q;
  }
  const int64_t x_elem = blocks ? static_cast<int64_t>(sizeof(Q8Pair)) : 4;
  const int64_t row_bytes = cpu_matrix_bytes(weight.format, 1, k);
  const DotKernel kernel = dot_kernel();
  const bool accumulate = s.out == LinearOut::add_f32;
  parallel_for((n + kRowTile - 1) / kRowTile, 1, [&](int64_t begin, int64_t end) {
    const int64_t r0 = begin * kRowTile, r1 = std::min(n, end * kRowTile);
    for (int64_t t0 = 0; t0 < tokens; t0 += kTokenChunk) {
      const DotArgs args{static_cast<const std::byte*>(weight.data) + r0 * row_bytes,
                         row_bytes,
                         r1 - r0,
                         static_cast<const char*>(x) + t0 * x_stride * x_elem,
                         x_stride,
                         std::min(kTokenChunk, tokens - t0),
                         k,
                         out + t0 * n + r0,
                         n,
                         accumulate};
      kernel(weight.format, args);
    }
  });
}

}  // namespace kiln::cpu
