// The GPU's quantized layout (templates/weight_matrix.hpp, runtime/weights/quant_repack.hpp): every
// value of a repacked Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q2_K / Q3_K / Q4_K / Q5_K / Q6_K matrix is
// ggml's dequantized value, rows whose block count is not a multiple of the group's are padded
// with zeros, and one Q4_0 word, the fifth bits of Q5_0 and Q5_K, Q6_K's lane columns and Q2_K's
// and Q3_K's lane words are checked bit by bit.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <catch2/catch.hpp>

#include "runtime/core/dtype.hpp"
#include "runtime/weights/dequant.hpp"
#include "runtime/weights/quant_repack.hpp"
#include "tests/weights/test_support.hpp"

using namespace kiln;

namespace {

void check_round_trip(GgmlType type, int64_t n, int64_t k) {
  const MatrixFormat f = *matrix_format_of(type);
  const std::vector<std::byte> rows = test::random_gguf_blocks(type, n, k, static_cast<uint32_t>(n * 1000 + k));
  std::vector<float> expect(static_cast<size_t>(n * k));
  dequantize(type, rows, expect);
  std::vector<std::byte> matrix(static_cast<size_t>(matrix_bytes(f, n, k)), std::byte{0});
  const size_t row_bytes = ggml_tensor_bytes(type, k);
  for (int64_t r = 0; r < n; ++r) {
    repack_row(f, std::span<const std::byte>(rows).subspan(static_cast<size_t>(r) * row_bytes, row_bytes), n, k, r,
               matrix.data());
  }
  INFO(ggml_type_name(type) << " [" << n << ", " << k << "]");
  CHECK(matrix_bytes(f, n, k) >= static_cast<int64_t>(rows.size()));
  int64_t mismatches = 0;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) mismatches += matrix_value(f, matrix.data(), n, k, r, c) != expect[r * k + c];
  }
  CHECK(mismatches == 0);
  if (is_k_quant(f)) return;  // whole super-blocks: no padding
  // The padding blocks of the last group (k / 32 not a multiple of the group's blocks) stay zero.
  const int64_t blocks = k / 32, padded = quant_row_groups(f, k) * quant_group_blocks(f);
  const int64_t width = quant_block_scale_bytes(f);  // d, and Q4_1's and Q5_1's m
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = blocks; b < padded; ++b) {
      uint32_t scale = 0;
      std::memcpy(&scale, matrix.data() + quant_after_high_offset(f, n, k) + (r * padded + b) * width,
                  static_cast<size_t>(width));
      CHECK(scale == 0);
    }
  }
}

}  // namespace

TEST_CASE("quant repack: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K rows keep ggml's values in the "
          "GPU layout",
          "[weights]") {
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1}) {
    check_round_trip(type, 1, 32);    // one block: a group padded
    check_round_trip(type, 3, 96);    // 3 blocks: Q8_0 pads 1, Q4_0 pads 1
    check_round_trip(type, 5, 576);   // SmolLM2's hidden size: 18 blocks (Q4_0 pads 2)
    check_round_trip(type, 17, 2048);
  }
  check_round_trip(GgmlType::Q4_K, 1, 256);  // one super-block: both halves of its packed scales
  check_round_trip(GgmlType::Q4_K, 7, 1536);
  check_round_trip(GgmlType::Q4_K, 17, 2048);
  check_round_trip(GgmlType::Q5_K, 1, 256);
  check_round_trip(GgmlType::Q5_K, 7, 1536);
  check_round_trip(GgmlType::Q5_K, 17, 2048);
  check_round_trip(GgmlType::Q6_K, 1, 256);
  check_round_trip(GgmlType::Q6_K, 7, 1536);  // 6 super-blocks: 12 groups
  check_round_trip(GgmlType::Q6_K, 17, 2048);
  for (GgmlType type : {GgmlType::Q2_K, GgmlType::Q3_K}) {  // a group is a super-block
    check_round_trip(type, 1, 256);
    check_round_trip(type, 7, 1536);
    check_round_trip(type, 17, 2048);
  }
  CHECK(matrix_bytes(MatrixFormat::q2_k, 4096, 14336) == 4096LL * 14336 / 256 * 84);  // ggml's bytes
  CHECK(matrix_bytes(MatrixFormat::q3_k, 4096, 14336) == 4096LL * 14336 / 256 * 110);
  CHECK(matrix_format_of(GgmlType::Q2_K) == MatrixFormat::q2_k);
  CHECK(matrix_format_of(GgmlType::Q3_K) == MatrixFormat::q3_k);
  CHECK(matrix_bytes(MatrixFormat::q6_k, 4096, 14336) == 4096LL * 14336 / 256 * 210);
  CHECK(matrix_format_of(GgmlType::Q6_K) == MatrixFormat::q6_k);
  CHECK(matrix_bytes(MatrixFormat::q4_0, 4096, 4096) == 4096LL * 4096 / 32 * 18);  // ggml's bytes, no padding
  CHECK(matrix_bytes(MatrixFormat::q8_0, 4096, 4096) == 4096LL * 4096 / 32 * 34);
  CHECK(matrix_bytes(MatrixFormat::q4_k, 4096, 14336) == 4096LL * 14336 / 256 * 144);
  CHECK(matrix_format_of(GgmlType::Q4_K) == MatrixFormat::q4_k);
  CHECK(matrix_format_of(GgmlType::Q5_K) == MatrixFormat::q5_k);
  CHECK(matrix_bytes(MatrixFormat::q4_1, 576, 1536) == 576LL * 1536 / 32 * 20);
  CHECK(matrix_bytes(MatrixFormat::q5_0, 576, 1536) == 576LL * 1536 / 32 * 22);
  CHECK(matrix_format_of(GgmlType::Q4_1) == MatrixFormat::q4_1);
  CHECK(matrix_format_of(GgmlType::Q5_0) == MatrixFormat::q5_0);
  CHECK(matrix_bytes(MatrixFormat::q5_1, 576, 1536) == 576LL * 1536 / 32 * 24);
  CHECK(matrix_bytes(MatrixFormat::q5_k, 4096, 14336) == 4096LL * 14336 / 256 * 176);
  CHECK(matrix_format_of(GgmlType::Q5_1) == MatrixFormat::q5_1);
}

TEST_CASE("quant repack: a Q4_0 lane word holds columns 8q + 2p at bits 4p and 8q + 2p + 1 at bits 16 + 4p", "[weights]") {
  // One block, d = 1.0: quant byte j holds column j (low nibble) and column j + 16 (high nibble).
  std::vector<std::byte> block(18);
  const uint16_t one = f32_to_f16(1.0f);
  std::memcpy(block.data(), &one, 2);
  for (int j = 0; j < 16; ++j) block[2 + j] = std::byte(static_cast<uint8_t>((j % 16) | ((15 - j) << 4)));
  std::vector<std::byte> matrix(static_cast<size_t>(matrix_bytes(MatrixFormat::q4_0, 1, 32)), std::byte{0});
  repack_row(MatrixFormat::q4_0, block, 1, 32, 0, matrix.data());
  for (int q = 0; q < 4; ++q) {
    uint32_t word;
    std::memcpy(&word, matrix.data() + q * 16, 4);  // lane q's 16 bytes start with block 0's word
    for (int p = 0; p < 4; ++p) {
      const int c0 = 8 * q + 2 * p, c1 = c0 + 1;
      const auto nibble = [](int c) { return c < 16 ? c : 15 - (c - 16); };
      CHECK(((word >> (4 * p)) & 0xF) == static_cast<uint32_t>(nibble(c0)));
      CHECK(((word >> (16 + 4 * p)) & 0xF) == static_cast<uint32_t>(nibble(c1)));
    }
  }
}

TEST_CASE("quant repack: Q5_0's fifth bits of block b: lane q's word, column 8q + 2p at bit 4b + p, 8q + 2p + 1 at 16 + 4b + p",
          "[weights]") {
  // One row of four blocks (one group), d = 1.0, nibbles 0; block b's fifth bits: column c set
  // where (c + b) % 3 == 0.
  std::vector<std::byte> row(4 * 22, std::byte{0});
  const uint16_t one = f32_to_f16(1.0f);
  const auto set = [](int b, int c) { return (c + b) % 3 == 0; };
  for (int b = 0; b < 4; ++b) {
    std::memcpy(row.data() + 22 * b, &one, 2);
    uint32_t qh = 0;
    for (int c = 0; c < 32; ++c) qh |= static_cast<uint32_t>(set(b, c)) << c;
    std::memcpy(row.data() + 22 * b + 2, &qh, 4);
  }
  const MatrixFormat f = MatrixFormat::q5_0;
  std::vector<std::byte> matrix(static_cast<size_t>(matrix_bytes(f, 1, 128)), std::byte{0});
  repack_row(f, row, 1, 128, 0, matrix.data());
  for (int q = 0; q < 4; ++q) {
    uint32_t word;
    std::memcpy(&word, matrix.data() + quant_scales_offset(f, 1, 128) + q * 4, 4);
    for (int b = 0; b < 4; ++b) {
      for (int p = 0; p < 4; ++p) {
        const int c0 = 8 * q + 2 * p;
        INFO("lane " << q << " block " << b << " pair " << p);
        CHECK(((word >> (4 * b + p)) & 1) == static_cast<uint32_t>(set(b, c0)));
        CHECK(((word >> (16 + 4 * b + p)) & 1) == static_cast<uint32_t>(set(b, c0 + 1)));
        CHECK(matrix_value(f, matrix.data(), 1, 128, 0, 32 * b + c0) == (set(b, c0) ? 0.0f : -16.0f));
      }
    }
  }
}

TEST_CASE("quant repack: quantize_q8_0 is ggml's reference quantizer (values within half a step)", "[weights]") {
  std::vector<float> x(96);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * (i < 32 ? 1e-2f : 3.0f);  // steps of normal fp16 scales
  x[40] = 0.0f;
  std::fill(x.begin() + 64, x.end(), 0.0f);  // an all-zero block: scale 0, quants 0
  std::vector<std::byte> q8(96 / 32 * 34);
  quantize_q8_0(x, q8);
  std::vector<float> back(96);
  dequantize(GgmlType::Q8_0, q8, back);
  for (size_t b = 0; b < 3; ++b) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    for (size_t j = 0; j < 32; ++j) {
      INFO("value " << b * 32 + j);
      CHECK(std::fabs(back[b * 32 + j] - x[b * 32 + j]) <= (0.5f + 127.0f / 2048) * amax / 127 * 1.001f);
    }
  }
  CHECK(static_cast<int8_t>(q8[2 + 0]) == 0);                       // sin(0) = 0
  CHECK(std::abs(static_cast<int8_t>(q8[34 + 2 + 8])) == 0);       // x[40] = 0
  CHECK(static_cast<uint8_t>(q8[68]) == 0);                         // zero block: d = 0
  CHECK_THROWS_AS(quantize_q8_0(std::span<const float>(x.data(), 33), q8), kiln::Error);
}

TEST_CASE("quant repack: the CPU layout holds ggml's values, 16 rows interleaved, a last group padded", "[weights]") {
  for (const GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                              GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    const MatrixFormat f = *matrix_format_of(type);
    for (const auto& [n, k] :
         {std::pair<int64_t, int64_t>{1, 32}, {17, 64}, {16, 96}, {5, 576}, {33, 512}, {1, 256}, {18, 768}}) {
      if (k % static_cast<int64_t>(ggml_block_size(type)) != 0) continue;
      INFO(ggml_type_name(type) << " [" << n << ", " << k << "]");
      const std::vector<std::byte> rows = test::random_gguf_blocks(type, n, k, static_cast<uint32_t>(n + k));
      std::vector<float> expect(static_cast<size_t>(n * k));
      dequantize(type, rows, expect);
      const size_t row_bytes = rows.size() / static_cast<size_t>(n);
      // Poisoned: each row must write all of its own bytes, and (rows in reverse order) no other row's.
      std::vector<std::byte> cpu(static_cast<size_t>(cpu_matrix_bytes(f, n, k)), std::byte{0xAB});
      for (int64_t r = n - 1; r >= 0; --r) {
        repack_cpu_row(f, std::span<const std::byte>(rows.data() + r * row_bytes, row_bytes), k, r, cpu.data());
      }
      int64_t equal = 0;
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < k; ++c) equal += cpu_matrix_value(f, cpu.data(), k, r, c) == expect[static_cast<size_t>(r * k + c)];
      }
      CHECK(equal == n * k);
    }
  }
  CHECK(cpu_matrix_bytes(MatrixFormat::q4_1, 576, 1536) == 576LL * 1536 / 32 * 20);  // ggml's bytes
  CHECK(cpu_matrix_bytes(MatrixFormat::q5_0, 16, 64) == 16LL * 2 * 22);
  CHECK(cpu_matrix_bytes(MatrixFormat::q8_0, 2, 96) == 16LL * 3 * 34);               // a padded group
  // The K-quants: a header of fp16 d (and -dmin) a row before each 8 blocks, an int8 sub-block
  // scale (and min) a row in each block (two where a scale is per 16 values).
  CHECK(cpu_matrix_bytes(MatrixFormat::q4_k, 16, 256) == 16LL * 4 + 8 * (256 + 16 * 2));  // 4.625 bits a weight
  CHECK(cpu_matrix_bytes(MatrixFormat::q5_k, 16, 256) == 16LL * 4 + 8 * (320 + 16 * 2));  // 5.625
  CHECK(cpu_matrix_bytes(MatrixFormat::q6_k, 16, 256) == 16LL * 210);                     // ggml's bytes
  CHECK(cpu_matrix_bytes(MatrixFormat::q3_k, 16, 512) == 2 * (16LL * 2 + 8 * (192 + 16 * 2)));  // 3.5625
  CHECK(cpu_matrix_bytes(MatrixFormat::q2_k, 16, 256) == 16LL * 4 + 8 * (128 + 16 * 4));  // 3.125
  CHECK(cpu_matrix_bytes(MatrixFormat::q5_1, 16, 64) == 16LL * 2 * 24);                   // ggml's bytes
}

TEST_CASE("quant repack: a Q6_K lane holds columns 4q..4q+3 and 16+4q..16+4q+3 of each block, high bits apart",
          "[weights]") {
  // One super-block, d = 1, every scale 1: value v's quant u = v % 64, so value = v % 64 - 32.
  std::vector<std::byte> super(210, std::byte{0});
  for (int v = 0; v < 256; ++v) {
    const int u = v % 64, h = v / 128, l = v % 32, t = (v % 128) / 32;
    auto& lo = super[static_cast<size_t>(64 * h + l + 32 * (t % 2))];
    lo |= std::byte(static_cast<uint8_t>(t < 2 ? u & 0x0F : (u & 0x0F) << 4));
    super[static_cast<size_t>(128 + 32 * h + l)] |= std::byte(static_cast<uint8_t>((u >> 4) << (2 * t)));
  }
  for (int j = 0; j < 16; ++j) super[static_cast<size_t>(192 + j)] = std::byte{1};
  const uint16_t one = f32_to_f16(1.0f);
  std::memcpy(super.data() + 208, &one, 2);
  std::vector<std::byte> matrix(static_cast<size_t>(matrix_bytes(MatrixFormat::q6_k, 1, 256)), std::byte{0});
  repack_row(MatrixFormat::q6_k, super, 1, 256, 0, matrix.data());
  for (int q = 0; q < 4; ++q) {
    uint32_t word, high;
    std::memcpy(&word, matrix.data() + q * 16, 4);  // lane q's word of block 0
    std::memcpy(&high, matrix.data() + quant_scales_offset(MatrixFormat::q6_k, 1, 256) + q * 8, 4);
    for (int p = 0; p < 4; ++p) {
      const int c = (p / 2) * 16 + 4 * q + (p % 2) * 2;  // the pair's first column
      INFO("lane " << q << " pair " << p);
      CHECK(((word >> (4 * p)) & 0x0F) == static_cast<uint32_t>(c % 16));
      CHECK(((word >> (16 + 4 * p)) & 0x0F) == static_cast<uint32_t>((c + 1) % 16));
      CHECK(((high >> (2 * p)) & 3) == static_cast<uint32_t>(c / 16));
      CHECK(((high >> (16 + 2 * p)) & 3) == static_cast<uint32_t>((c + 1) / 16));
    }
  }
  for (int c = 0; c < 256; ++c) CHECK(matrix_value(MatrixFormat::q6_k, matrix.data(), 1, 256, 0, c) == c % 64 - 32);
}

TEST_CASE("quant repack: a Q2_K / Q3_K lane holds 16 bits of each of a super-block's 8 blocks, in Q6_K's lane columns",
          "[weights]") {
  // One super-block, d = 1 (Q2_K: dmin = 1), every scale 1 (Q3_K: 33, d·(sc - 32) = 1), mins 0:
  // value v's 2-bit quant is (v + v / 7) % 4, Q3_K's third bit (v / 3) % 2.
  const auto low = [](int v) { return static_cast<uint32_t>((v + v / 7) % 4); };
  const auto third = [](int v) { return static_cast<uint32_t>((v / 3) % 2); };
  const uint16_t one = f32_to_f16(1.0f);
  for (const MatrixFormat f : {MatrixFormat::q2_k, MatrixFormat::q3_k}) {
    const bool q3 = f == MatrixFormat::q3_k;
    std::vector<std::byte> super(q3 ? 110 : 84, std::byte{0});
    std::byte* qs = super.data() + (q3 ? 32 : 16);
    for (int v = 0; v < 256; ++v) {  // ggml's qs: value v at bits 2 ((v % 128) / 32) of byte 32 (v / 128) + v % 32
      qs[32 * (v / 128) + v % 32] |= std::byte(static_cast<uint8_t>(low(v) << (2 * ((v % 128) / 32))));
      if (q3) super[v % 32] |= std::byte(static_cast<uint8_t>(third(v) << (v / 32)));  // hmask
    }
    if (q3) {
      for (int j = 0; j < 8; ++j) super[96 + j] = std::byte{0x11};  // low 4 bits 1, high 2 bits 2: 33
      for (int j = 0; j < 4; ++j) super[104 + j] = std::byte{0xAA};
      std::memcpy(super.data() + 108, &one, 2);
    } else {
      for (int j = 0; j < 16; ++j) super[j] = std::byte{1};  // sc 1, m 0
      std::memcpy(super.data() + 80, &one, 2);
      std::memcpy(super.data() + 82, &one, 2);
    }
    std::vector<std::byte> matrix(static_cast<size_t>(matrix_bytes(f, 1, 256)), std::byte{0});
    repack_row(f, super, 1, 256, 0, matrix.data());
    for (int q = 0; q < 4; ++q) {
      for (int b = 0; b < 8; ++b) {
        uint32_t word, high = 0;
        std::memcpy(&word, matrix.data() + q * 16 + (b / 2) * 4, 4);  // lane q's word of blocks b - b % 2, + 1
        if (q3) std::memcpy(&high, matrix.data() + quant_scales_offset(f, 1, 256) + q * 8 + (b / 4) * 4, 4);
        for (int p = 0; p < 4; ++p) {
          const int v = 32 * b + (p / 2) * 16 + 4 * q + (p % 2) * 2;  // the pair's first column
          INFO(matrix_format_name(f) << " lane " << q << " block " << b << " pair " << p);
          CHECK(((word >> (8 * (b % 2) + 2 * p)) & 3) == low(v));
          CHECK(((word >> (16 + 8 * (b % 2) + 2 * p)) & 3) == low(v + 1));
          if (q3) {
            CHECK(((high >> (4 * (b % 4) + p)) & 1) == third(v));
            CHECK(((high >> (16 + 4 * (b % 4) + p)) & 1) == third(v + 1));
          }
        }
      }
    }
    for (int v = 0; v < 256; ++v) {
      const float expect = q3 ? static_cast<float>(low(v) + 4 * third(v)) - 4.0f : static_cast<float>(low(v));
      INFO(matrix_format_name(f) << " value " << v);
      CHECK(matrix_value(f, matrix.data(), 1, 256, 0, v) == expect);
    }
  }
}

TEST_CASE("quant repack: FP8 rows stay as they are, a scale per 128 × 128 block", "[weights]") {
  // Row r's code at column c is (r + 3c) % 126 + 1 (no NaN), each block's scale its own.
  constexpr int64_t n = 130, k = 160;  // a partial block of rows, and of columns; 3 groups a row, the last half padding
  std::vector<std::byte> matrix(static_cast<size_t>(matrix_bytes(MatrixFormat::fp8, n, k)), std::byte{0});  // as the loader zeroes it
  CHECK(fp8_row_bytes(k) == 192);
  CHECK(matrix.size() == n * 192 + 2 * 2 * 4);
  std::vector<uint8_t> codes(k);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) codes[c] = static_cast<uint8_t>((r + 3 * c) % 126 + 1);
    repack_fp8_row(codes, n, k, r, matrix.data());
  }
  for (int64_t t = 0; t < 2; ++t) {
    for (int64_t j = 0; j < 2; ++j) set_fp8_scale(matrix.data(), n, k, 128 * t, j, static_cast<float>(1 + 2 * t + j));
  }
  // Row 129 at 129 · 192 bytes: its codes, then zeros to the next row.
  for (int64_t c = 0; c < 192; ++c) {
    CHECK(static_cast<uint8_t>(matrix[129 * 192 + c]) == (c < k ? (129 + 3 * c) % 126 + 1 : 0));
  }
  int64_t wrong = 0;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const float scale = static_cast<float>(1 + 2 * (r / 128) + c / 128);
      wrong += matrix_value(MatrixFormat::fp8, matrix.data(), n, k, r, c) !=
               f8e4m3_to_f32(static_cast<uint8_t>((r + 3 * c) % 126 + 1)) * scale;
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("quant repack: quantize_fp8 maps the matrix's largest value to ±448, the rest to the nearest code", "[weights]") {
  constexpr int64_t rows = 3, k = 160;
  std::vector<float> x(rows * k);
  for (int64_t i = 0; i < rows * k; ++i) x[i] = std::sin(static_cast<float>(i)) * (i % k < 128 ? 0.02f : 5.0f);
  for (int64_t c = 128; c < k; ++c) x[1 * k + c] = 0.0f;
  x[2 * k + 5] = -7.5f;  // the largest
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float scale = fp8_tensor_scale(amax);
  CHECK(scale == 7.5f / 448.0f);
  std::vector<uint8_t> codes(x.size());
  quantize_fp8(x, scale, codes);
  CHECK(codes[2 * k + 5] == 0xFE);  // -448
  int small_nonzero = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      INFO("row " << r << " column " << c);
      CHECK(codes[r * k + c] == f32_to_f8e4m3(x[r * k + c] / scale));
      small_nonzero += c < 128 && (codes[r * k + c] & 0x7F) != 0;
    }
  }
  CHECK(small_nonzero > 300);  // values 375 times smaller than the largest keep their codes
  CHECK(fp8_tensor_scale(0.0f) == 1.0f);
  std::vector<uint8_t> zero_codes(4, 0xAA);
  quantize_fp8(std::vector<float>(4, 0.0f), 1.0f, zero_codes);
  CHECK(std::all_of(zero_codes.begin(), zero_codes.end(), [](uint8_t v) { return v == 0; }));
  CHECK_THROWS_WITH(quantize_fp8(std::vector<float>(4, 1.0f), 0.0f, zero_codes), Catch::Contains("scale 0"));
}
