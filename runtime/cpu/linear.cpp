#include "runtime/cpu/linear.hpp"

#include <algorithm>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/parallel.hpp"
#include "runtime/cpu/bf16_amx.hpp"
#include "runtime/cpu/bf16_avx512.hpp"
#include "runtime/cpu/bf16_pack.hpp"
#include "runtime/cpu/quant_amx.hpp"
#include "runtime/cpu/quant_dot.hpp"

namespace kiln::cpu {

namespace {

// Rows go to the threads in tiles of this many: a group of the block formats' layout, a multiple
// of the bf16 kernels' row tile.
constexpr int64_t kRowTile = kCpuRowGroup;
// Tokens a thread's rows take at a time: a chunk's quantized activations (80 bytes per 32
// values: 320 KB for 64 tokens of 2,048) stay in L2 while the rows stream past them.
constexpr int64_t kTokenChunk = 64;
// Tokens from which the block formats run on AMX-INT8: one tile's.
constexpr int64_t kAmxTokens = 16;

}  // namespace

void linear(const shape::linear& s, const float* in, CpuMatrix weight, float* out, int64_t tokens) {
  const int64_t n = s.n, k = s.k;
  const bool accumulate = s.out == LinearOut::add_f32;
  // bf16 rows packed in 12 bits (the loader packs only where this kernel runs).
  if (weight.format == MatrixFormat::bf16_packed && packed_bf16_available() && packable_bf16(n, k)) {
    return linear_bf16_packed_avx512(in, static_cast<const std::byte*>(weight.data), n, k, out, tokens, accumulate);
  }
  const bool blocks = is_cpu_block_format(weight.format);
  const bool parts_ok = weight.split == 0 || (blocks && is_cpu_block_format(weight.tail_format) && weight.split < n);
  if ((!blocks && weight.format != MatrixFormat::bf16) || (blocks && k % kQuantBlockValues != 0) || !parts_ok) {
    fail("internal: the fast CPU linear has no kernel for a ", static_cast<int>(weight.format), " matrix of [", n,
         ", ", k, "] (split at row ", weight.split, ")");
  }
  // bf16 rows of an even length on AMX where there is one, for every token count (bf16_amx.hpp).
  if (weight.format == MatrixFormat::bf16 && k % 2 == 0 && amx_bf16_available()) {
    return linear_bf16_amx(in, static_cast<const uint16_t*>(weight.data), n, k, out, tokens, accumulate);
  }
  // Else on AVX-512 BF16's vdpbf16ps where there is one, against bf16 activations (bf16_avx512.hpp).
  if (weight.format == MatrixFormat::bf16 && avx512_bf16_available()) {
    return linear_bf16_avx512(in, static_cast<const uint16_t*>(weight.data), n, k, out, tokens, accumulate);
  }
  // The step's quantized activations: grown once, reused by every later call on this thread.
  thread_local std::vector<Q8Block> quantized;
  const void* x = in;
  int64_t x_stride = k;  // per token: floats, or Q8Block blocks
  if (blocks) {
    x_stride = k / kQuantBlockValues;
    if (static_cast<int64_t>(quantized.size()) < tokens * x_stride) quantized.resize(tokens * x_stride);
    Q8Block* q = quantized.data();
    parallel_for(tokens, 8, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) quantize_activations(in + t * k, k, q + t * x_stride);
    });
    x = q;
  }
  const int64_t x_elem = blocks ? static_cast<int64_t>(sizeof(Q8Block)) : 4;
  // A step of 16 tokens or more (prefill) on AMX-INT8 where there is one: the same bits as the
  // VNNI kernel's, faster (quant_amx.hpp).
  const DotKernel kernel = blocks && tokens >= kAmxTokens && amx_int8_available() ? dot_kernel_amx_int8() : dot_kernel();
  // Rows [row0, row0 + rows) of the output from a matrix of that many rows in `format` at `data`.
  const auto rows_of = [&](const void* data, MatrixFormat format, int64_t row0, int64_t rows) {
    // Bytes from one row tile to the next: a group of 16 rows, or 16 bf16 rows.
    const int64_t tile_bytes = cpu_matrix_bytes(format, kRowTile, k);
    parallel_for((rows + kRowTile - 1) / kRowTile, 1, [&](int64_t begin, int64_t end) {
      const int64_t r0 = begin * kRowTile, r1 = std::min(rows, end * kRowTile);
      for (int64_t t0 = 0; t0 < tokens; t0 += kTokenChunk) {
        const DotArgs args{static_cast<const std::byte*>(data) + begin * tile_bytes,
                           blocks ? tile_bytes : 2 * k,
                           r1 - r0,
                           static_cast<const char*>(x) + t0 * x_stride * x_elem,
                           x_stride,
                           std::min(kTokenChunk, tokens - t0),
                           k,
                           out + t0 * n + row0 + r0,
                           n,
                           accumulate};
        kernel(format, args);
      }
    });
  };
  if (weight.split == 0) return rows_of(weight.data, weight.format, 0, n);
  // Two block formats (CpuMatrix::split): each part over the threads in turn, the same activations.
  rows_of(weight.data, weight.format, 0, weight.split);
  rows_of(weight.tail, weight.tail_format, weight.split, n - weight.split);
}

const char* block_isa_suffix() { return amx_int8_available() ? ", AMX-INT8" : ""; }

const char* bf16_isa_suffix() {
  return amx_bf16_available() ? ", AMX-BF16" : avx512_bf16_available() ? ", AVX-512 BF16" : "";
}

}  // namespace kiln::cpu
