// The fast CPU backend's projection kernels (runtime/cpu) against the reference linear on the
// same weights dequantized by ggml's rules: every format, every instruction set this processor
// has, odd shapes (rows and tokens that are not whole tiles), store and accumulate.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/core/dtype.hpp"
#include "runtime/cpu/bf16_amx.hpp"
#include "runtime/cpu/bf16_avx512.hpp"
#include "runtime/cpu/linear.hpp"
#include "runtime/cpu/quant_amx.hpp"
#include "runtime/cpu/quant_dot.hpp"
#include "runtime/ref/ops.hpp"
#include "runtime/weights/dequant.hpp"
#include "runtime/weights/float_convert.hpp"
#include "runtime/weights/quant_repack.hpp"
#include "tests/weights/test_support.hpp"

using namespace kiln;

namespace {

struct Weights {
  std::vector<std::byte> stored;  // as the fast backend keeps them
  std::vector<float> values;      // what they mean, for the reference
};

Weights make_weights(MatrixFormat f, int64_t n, int64_t k, uint32_t seed) {
  Weights w;
  w.values.resize(static_cast<size_t>(n * k));
  if (f == MatrixFormat::bf16) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> value(0.0f, 0.05f);
    std::vector<float> raw(w.values.size());
    for (float& v : raw) v = value(rng);
    std::vector<uint16_t> bits(raw.size());
    f32_elements_to_bf16(raw, bits);
    w.stored.resize(bits.size() * 2);
    std::memcpy(w.stored.data(), bits.data(), w.stored.size());
    bf16_elements_to_f32(w.stored.data(), w.values);
    return w;
  }
  const GgmlType type = ggml_type_of(f);
  const size_t block_bytes = ggml_block_bytes(type);
  // Q2_K's, Q3_K's and Q6_K's d (and dmin) come last: random_gguf_blocks keeps them finite
  const bool d_last = has_half_block_scales(f);
  std::vector<std::byte> ggml =
      d_last ? test::random_gguf_blocks(type, n, k, seed)
             : test::random_scaled_blocks(block_bytes, n, k, seed, static_cast<int64_t>(ggml_block_size(type)));
  if (cpu_has_min(f) && !d_last) {  // the random bytes would make any fp16 min: keep it in [-0.1, 0.1)
    std::mt19937 rng(seed + 1);
    std::uniform_real_distribution<float> min(-0.1f, 0.1f);
    for (size_t b = 0; b * block_bytes < ggml.size(); ++b) {
      const uint16_t m = f32_to_f16(min(rng));
      std::memcpy(ggml.data() + b * block_bytes + 2, &m, 2);
    }
  }
  dequantize(type, ggml, w.values);
  const int64_t ggml_row = k / static_cast<int64_t>(ggml_block_size(type)) * static_cast<int64_t>(block_bytes);
  w.stored.assign(static_cast<size_t>(cpu_matrix_bytes(f, n, k)), std::byte{0});  // padding rows: zero, as the loader's
  for (int64_t r = 0; r < n; ++r) {
    repack_cpu_row(f, std::span<const std::byte>(ggml.data() + r * ggml_row, static_cast<size_t>(ggml_row)), k, r,
                   w.stored.data());
  }
  return w;
}

std::vector<float> make_inputs(int64_t tokens, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> value(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(tokens * k));
  for (float& v : x) v = value(rng);
  return x;
}

double nmse(const std::vector<float>& ref, const std::vector<float>& got) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err += (static_cast<double>(ref[i]) - got[i]) * (static_cast<double>(ref[i]) - got[i]);
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return err / norm;
}

// Limits: bf16 rows against fp32 inputs are the reference's products summed in another order;
// block formats see their inputs quantized in two 8-bit parts per 32 values (quant_dot.hpp).
double limit(MatrixFormat f) { return f == MatrixFormat::bf16 ? 1e-10 : 1e-7; }

// The inputs rounded to bf16 (nearest even), as the AVX-512 BF16 kernel takes them: about 1.3e-6 of
// NMSE for inputs whose relative rounding error is uniform in ±2^-9 (bf16_avx512.hpp).
constexpr double kBf16InputsLimit = 1e-5;

// cpu::linear's limit for a format on this processor: bf16 rows run against bf16 inputs where
// AVX-512 BF16 takes them (and AMX does not).
double linear_limit(MatrixFormat f) {
  const bool bf16_inputs = f == MatrixFormat::bf16 && !cpu::amx_bf16_available() && cpu::avx512_bf16_available();
  return bf16_inputs ? kBf16InputsLimit : limit(f);
}

std::vector<float> rounded_to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> bits(x.size());
  f32_elements_to_bf16(x, bits);
  std::vector<float> back(x.size());
  bf16_elements_to_f32(reinterpret_cast<const std::byte*>(bits.data()), back);
  return back;
}

const MatrixFormat kFormats[] = {MatrixFormat::q8_0, MatrixFormat::q4_0, MatrixFormat::q4_1, MatrixFormat::q5_0,
                                 MatrixFormat::q5_1, MatrixFormat::q2_k, MatrixFormat::q3_k, MatrixFormat::q4_k,
                                 MatrixFormat::q5_k, MatrixFormat::q6_k, MatrixFormat::bf16};

struct Shape {
  int64_t n, k, tokens;
};
// Rows and tokens off the kernels' tiles (groups of 16 rows × 8 or 4 tokens; bf16 2 × 6, and 8
// rows × 1 token on AVX2), a row of one block, rows of odd blocks, SmolLM2's 576 and 1,536, a
// prefill beyond one token chunk (64), and bf16 rows whose length is no multiple of 16 or 32.
const Shape kShapes[] = {{37, 64, 1},  {64, 576, 1},   {21, 512, 1}, {19, 96, 5},  {40, 256, 9},
                         {16, 32, 70}, {30, 1536, 3}, {7, 160, 66}, {11, 200, 7}, {11, 200, 1},
                         {18, 768, 17}};

// The block formats hold rows of whole blocks (the K-quants' of 256 values) only; bf16 any length.
bool fits(MatrixFormat f, const Shape& sh) {
  return f == MatrixFormat::bf16 || (sh.k % kQuantBlockValues == 0 && (!is_k_quant(f) || sh.k % 256 == 0));
}

}  // namespace

TEST_CASE("cpu kernels: each instruction set's dot products equal the reference linear", "[cpu]") {
  const std::pair<const char*, cpu::DotKernel> kernels[] = {{"portable", cpu::dot_kernel_portable()},
                                                            {"AVX2", cpu::dot_kernel_avx2()},
                                                            {"AVX-512 VNNI", cpu::dot_kernel_avx512_vnni()}};
  for (const auto& [isa, kernel] : kernels) {
    if (kernel == nullptr) {
      WARN(isa << ": not on this processor, not tested");
      continue;
    }
    for (const MatrixFormat f : kFormats) {
      for (const Shape& sh : kShapes) {
        if (!fits(f, sh)) continue;
        INFO(isa << " " << static_cast<int>(f) << " [" << sh.n << ", " << sh.k << "] × " << sh.tokens << " tokens");
        const Weights w = make_weights(f, sh.n, sh.k, static_cast<uint32_t>(sh.n * 7 + sh.k));
        const std::vector<float> x = make_inputs(sh.tokens, sh.k, static_cast<uint32_t>(sh.tokens));
        std::vector<float> expect(static_cast<size_t>(sh.tokens * sh.n), 0.0f);
        const shape::linear s{.n = static_cast<int>(sh.n), .k = static_cast<int>(sh.k), .out = LinearOut::store_f32};
        ref::linear(s, x.data(), w.values.data(), expect.data(), sh.tokens);

        const bool blocks = is_block_format(f);
        const int64_t per_token = sh.k / kQuantBlockValues;
        std::vector<cpu::Q8Block> q(static_cast<size_t>(sh.tokens * per_token));
        if (blocks) {
          for (int64_t t = 0; t < sh.tokens; ++t) cpu::quantize_activations(x.data() + t * sh.k, sh.k, q.data() + t * per_token);
        }
        std::vector<float> got(expect.size(), NAN);  // poisoned: every output must be written
        const cpu::DotArgs args{w.stored.data(), blocks ? cpu_matrix_bytes(f, kCpuRowGroup, sh.k) : 2 * sh.k, sh.n,
                                blocks ? static_cast<const void*>(q.data()) : x.data(), blocks ? per_token : sh.k,
                                sh.tokens, sh.k, got.data(), sh.n, false};
        kernel(f, args);
        CHECK(nmse(expect, got) <= limit(f));
      }
    }
  }
}

TEST_CASE("cpu kernels: cpu::linear over the thread pool stores and accumulates like the reference", "[cpu]") {
  for (const MatrixFormat f : kFormats) {
    for (const Shape& sh : kShapes) {
      if (!fits(f, sh)) continue;
      for (const LinearOut out : {LinearOut::store_f32, LinearOut::add_f32}) {
        INFO(static_cast<int>(f) << " [" << sh.n << ", " << sh.k << "] × " << sh.tokens << (out == LinearOut::add_f32 ? " +=" : " ="));
        const Weights w = make_weights(f, sh.n, sh.k, static_cast<uint32_t>(sh.n + sh.k));
        const std::vector<float> x = make_inputs(sh.tokens, sh.k, 99);
        const std::vector<float> start = make_inputs(sh.tokens, sh.n, 7);  // what += adds to
        const shape::linear s{.n = static_cast<int>(sh.n), .k = static_cast<int>(sh.k), .out = out};
        std::vector<float> expect = out == LinearOut::add_f32 ? start : std::vector<float>(start.size(), 0.0f);
        ref::linear(s, x.data(), w.values.data(), expect.data(), sh.tokens);
        std::vector<float> got = out == LinearOut::add_f32 ? start : std::vector<float>(start.size(), NAN);
        ref::linear(s, x.data(), CpuMatrix{w.stored.data(), f}, got.data(), sh.tokens);  // the generated forward's call
        CHECK(nmse(expect, got) <= linear_limit(f));
      }
    }
  }
}

// A matrix in two block formats (CpuMatrix::split: rows [0, split) in one, the rest in another,
// each part in its own layout), split inside a row group and at its edge, as a GGUF file's mixed
// qkv_proj loads: each part's rows as that format alone gives them.
TEST_CASE("cpu kernels: cpu::linear over a matrix in two block formats", "[cpu]") {
  struct Case {
    MatrixFormat head, tail;
    int64_t n, k, split, tokens;
  };
  const Case cases[] = {{MatrixFormat::q4_k, MatrixFormat::q6_k, 96, 256, 64, 1},
                        {MatrixFormat::q5_0, MatrixFormat::q8_0, 50, 576, 37, 3},
                        {MatrixFormat::q4_0, MatrixFormat::q4_1, 40, 64, 16, 70},
                        {MatrixFormat::q5_k, MatrixFormat::q6_k, 48, 512, 33, 9},     // a Q5_K_M file's qkv_proj
                        {MatrixFormat::q3_k, MatrixFormat::q5_k, 48, 768, 32, 5},     // a Q3_K_M file's
                        {MatrixFormat::q2_k, MatrixFormat::q4_k, 40, 256, 24, 1},     // a Q2_K file's
                        {MatrixFormat::q5_1, MatrixFormat::q8_0, 50, 576, 40, 1}};  // SmolLM2's, in it
  for (const Case& c : cases) {
    INFO(static_cast<int>(c.head) << " | " << static_cast<int>(c.tail) << " [" << c.n << ", " << c.k << "] at row "
                                  << c.split << " × " << c.tokens << " tokens");
    const Weights head = make_weights(c.head, c.split, c.k, 5), tail = make_weights(c.tail, c.n - c.split, c.k, 6);
    std::vector<float> values = head.values;
    values.insert(values.end(), tail.values.begin(), tail.values.end());
    const std::vector<float> x = make_inputs(c.tokens, c.k, 3);
    const shape::linear s{.n = static_cast<int>(c.n), .k = static_cast<int>(c.k), .out = LinearOut::store_f32};
    std::vector<float> expect(static_cast<size_t>(c.tokens * c.n), 0.0f);
    ref::linear(s, x.data(), values.data(), expect.data(), c.tokens);
    std::vector<float> got(expect.size(), NAN);  // poisoned: every output must be written
    const CpuMatrix m{.data = head.stored.data(), .format = c.head, .split = static_cast<int>(c.split),
                      .tail = tail.stored.data(), .tail_format = c.tail};
    ref::linear(s, x.data(), m, got.data(), c.tokens);
    CHECK(nmse(expect, got) <= std::max(linear_limit(c.head), linear_limit(c.tail)));
  }
}

TEST_CASE("cpu kernels: the fp32 reference keeps its own loop for fp32 rows", "[cpu]") {
  const std::vector<float> w = make_inputs(5, 8, 1), x = make_inputs(2, 8, 2);
  const shape::linear s{.n = 5, .k = 8, .out = LinearOut::store_f32};
  std::vector<float> a(10, NAN), b(10, NAN);
  ref::linear(s, x.data(), w.data(), a.data(), 2);
  ref::linear(s, x.data(), CpuMatrix{w.data(), MatrixFormat::f32}, b.data(), 2);
  CHECK(a == b);
}

TEST_CASE("cpu kernels: block formats on AMX-INT8 give the AVX-512 VNNI kernel's bits", "[cpu]") {
  const cpu::DotKernel amx = cpu::dot_kernel_amx_int8(), vnni = cpu::dot_kernel_avx512_vnni();
  if (amx == nullptr) {
    WARN("no AMX-INT8 here (or the kernel refused its tiles): not tested");
    return;
  }
  // Whole 16-token tiles and tiles with a rest, a last group short of 16 rows, rows of one block
  // and of the K-quants' super-blocks, store and accumulate.
  const Shape shapes[] = {{37, 64, 16}, {16, 32, 17}, {50, 512, 33}, {7, 256, 64}, {40, 768, 70}, {33, 2048, 48}};
  for (const MatrixFormat f : kFormats) {
    if (!is_cpu_block_format(f)) continue;
    for (const Shape& sh : shapes) {
      if (!fits(f, sh)) continue;
      for (const bool accumulate : {false, true}) {
        INFO(static_cast<int>(f) << " [" << sh.n << ", " << sh.k << "] × " << sh.tokens << " tokens" << (accumulate ? " +=" : " ="));
        const Weights w = make_weights(f, sh.n, sh.k, static_cast<uint32_t>(sh.n * 5 + sh.k));
        const std::vector<float> x = make_inputs(sh.tokens, sh.k, static_cast<uint32_t>(sh.tokens + 11));
        const int64_t per_token = sh.k / kQuantBlockValues;
        std::vector<cpu::Q8Block> q(static_cast<size_t>(sh.tokens * per_token));
        for (int64_t t = 0; t < sh.tokens; ++t) cpu::quantize_activations(x.data() + t * sh.k, sh.k, q.data() + t * per_token);
        const std::vector<float> start = make_inputs(sh.tokens, sh.n, 3);  // what += adds to
        std::vector<float> expect = accumulate ? start : std::vector<float>(start.size(), NAN);
        std::vector<float> got = expect;  // poisoned where it stores: every output must be written
        const auto args = [&](float* out) {
          return cpu::DotArgs{w.stored.data(), cpu_matrix_bytes(f, kCpuRowGroup, sh.k), sh.n, q.data(), per_token,
                              sh.tokens, sh.k, out, sh.n, accumulate};
        };
        vnni(f, args(expect.data()));
        amx(f, args(got.data()));
        CHECK(std::memcmp(expect.data(), got.data(), expect.size() * 4) == 0);
        if (!accumulate) {
          std::vector<float> ref(expect.size(), 0.0f);
          const shape::linear s{.n = static_cast<int>(sh.n), .k = static_cast<int>(sh.k), .out = LinearOut::store_f32};
          ref::linear(s, x.data(), w.values.data(), ref.data(), sh.tokens);
          CHECK(nmse(ref, got) <= limit(f));
        }
      }
    }
  }
}

TEST_CASE("cpu kernels: bf16 rows on AMX equal the reference, and a token's sums do not depend on the others", "[cpu]") {
  if (!cpu::amx_bf16_available()) {
    WARN("no AMX-BF16 here (or the kernel refused its tiles): not tested");
    return;
  }
  // Rows off the 32-row unit, columns off the 32-column chunk (80), token counts around the two
  // 16-token tiles.
  const Shape shapes[] = {{50, 80, 1}, {50, 80, 15}, {33, 96, 17}, {64, 2048, 33}, {7, 32, 70}, {96, 576, 40}};
  for (const Shape& sh : shapes) {
    INFO("[" << sh.n << ", " << sh.k << "] × " << sh.tokens << " tokens");
    const Weights w = make_weights(MatrixFormat::bf16, sh.n, sh.k, static_cast<uint32_t>(sh.n * 3 + sh.k));
    const std::vector<float> x = make_inputs(sh.tokens, sh.k, static_cast<uint32_t>(sh.tokens + 5));
    const shape::linear s{.n = static_cast<int>(sh.n), .k = static_cast<int>(sh.k), .out = LinearOut::store_f32};
    std::vector<float> expect(static_cast<size_t>(sh.tokens * sh.n), 0.0f);
    ref::linear(s, x.data(), w.values.data(), expect.data(), sh.tokens);
    std::vector<float> got(expect.size(), NAN);
    cpu::linear_bf16_amx(x.data(), reinterpret_cast<const uint16_t*>(w.stored.data()), sh.n, sh.k, got.data(), sh.tokens, false);
    CHECK(nmse(expect, got) <= limit(MatrixFormat::bf16));
    // The last token alone: the same bits as in the batch.
    std::vector<float> alone(static_cast<size_t>(sh.n), NAN);
    cpu::linear_bf16_amx(x.data() + (sh.tokens - 1) * sh.k, reinterpret_cast<const uint16_t*>(w.stored.data()), sh.n, sh.k,
                         alone.data(), 1, false);
    CHECK(std::memcmp(alone.data(), got.data() + (sh.tokens - 1) * sh.n, alone.size() * 4) == 0);
  }
}

TEST_CASE("cpu kernels: bf16 rows on AVX-512 BF16 equal the reference on bf16 inputs, and a token's sums do not depend on the others",
          "[cpu]") {
  if (!cpu::avx512_bf16_available()) {
    WARN("no AVX-512 BF16 here: not tested");
    return;
  }
  // Rows off the 4-row tile, columns off the 32-column chunk (80, 200, 2,050), token counts
  // around the 6-token tile and the 64-token chunk.
  const Shape shapes[] = {{50, 80, 1},   {50, 80, 7},   {33, 96, 17},  {64, 2048, 33},
                          {7, 32, 70},   {96, 576, 40}, {11, 200, 6},  {5, 2050, 13}};
  for (const Shape& sh : shapes) {
    for (const bool accumulate : {false, true}) {
      INFO("[" << sh.n << ", " << sh.k << "] × " << sh.tokens << " tokens" << (accumulate ? " +=" : " ="));
      const Weights w = make_weights(MatrixFormat::bf16, sh.n, sh.k, static_cast<uint32_t>(sh.n * 5 + sh.k));
      const std::vector<float> x = make_inputs(sh.tokens, sh.k, static_cast<uint32_t>(sh.tokens + 11));
      const std::vector<float> start = make_inputs(sh.tokens, sh.n, 3);  // what += adds to
      const shape::linear s{.n = static_cast<int>(sh.n), .k = static_cast<int>(sh.k),
                            .out = accumulate ? LinearOut::add_f32 : LinearOut::store_f32};
      std::vector<float> exact = accumulate ? start : std::vector<float>(start.size(), 0.0f);
      std::vector<float> on_bf16 = exact;
      ref::linear(s, x.data(), w.values.data(), exact.data(), sh.tokens);
      ref::linear(s, rounded_to_bf16(x).data(), w.values.data(), on_bf16.data(), sh.tokens);
      std::vector<float> got = accumulate ? start : std::vector<float>(start.size(), NAN);
      const auto* rows = reinterpret_cast<const uint16_t*>(w.stored.data());
      cpu::linear_bf16_avx512(x.data(), rows, sh.n, sh.k, got.data(), sh.tokens, accumulate);
      CHECK(nmse(on_bf16, got) <= limit(MatrixFormat::bf16));  // the same products in another order
      CHECK(nmse(exact, got) <= kBf16InputsLimit);
      // The last token alone: the same bits as in the batch.
      std::vector<float> alone(start.end() - sh.n, start.end());
      if (!accumulate) alone.assign(static_cast<size_t>(sh.n), NAN);
      cpu::linear_bf16_avx512(x.data() + (sh.tokens - 1) * sh.k, rows, sh.n, sh.k, alone.data(), 1, accumulate);
      CHECK(std::memcmp(alone.data(), got.data() + (sh.tokens - 1) * sh.n, alone.size() * 4) == 0);
    }
  }
}
