// Dequantizers: block geometry, one hand-built block per type with its arithmetic spelled out,
// and bit-exact agreement with gguf-py (the reference ggml's own Python package implements) on
// random blocks.
#include <bit>
#include <cstring>

#include <catch2/catch.hpp>

#include "dequant_expected.inc"
#include "runtime/weights/dequant.hpp"
#include "test_support.hpp"

using kiln::GgmlType;

namespace {

std::vector<float> run(GgmlType type, const std::vector<uint8_t>& block, size_t n) {
  std::vector<float> out(n, -12345.0f);  // poison: every element must be written
  kiln::dequantize(type, std::as_bytes(std::span(block)), out);
  return out;
}

void put_f16(std::vector<uint8_t>& b, size_t at, uint16_t bits) {
  b[at] = static_cast<uint8_t>(bits & 0xff);
  b[at + 1] = static_cast<uint8_t>(bits >> 8);
}

}  // namespace

TEST_CASE("dequant: block geometry of ggml types", "[dequant]") {
  struct Row {
    GgmlType type;
    size_t block_size, block_bytes;
  };
  // From ggml-common.h's block structs.
  for (const Row& r : {Row{GgmlType::F32, 1, 4}, Row{GgmlType::F16, 1, 2}, Row{GgmlType::BF16, 1, 2},
                       Row{GgmlType::Q8_0, 32, 34}, Row{GgmlType::Q4_0, 32, 18}, Row{GgmlType::Q4_1, 32, 20},
                       Row{GgmlType::Q4_K, 256, 144}, Row{GgmlType::Q6_K, 256, 210}, Row{GgmlType::Q5_0, 32, 22},
                       Row{GgmlType::Q8_1, 32, 36}, Row{GgmlType::Q2_K, 256, 84}, Row{GgmlType::Q3_K, 256, 110},
                       Row{GgmlType::Q5_K, 256, 176}, Row{GgmlType::Q8_K, 256, 292}, Row{GgmlType::IQ4_XS, 256, 136},
                       Row{GgmlType::IQ4_NL, 32, 18}, Row{GgmlType::TQ2_0, 256, 66}, Row{GgmlType::MXFP4, 32, 17},
                       Row{GgmlType::I64, 1, 8}}) {
    INFO(kiln::ggml_type_name(r.type));
    CHECK(kiln::ggml_block_size(r.type) == r.block_size);
    CHECK(kiln::ggml_block_bytes(r.type) == r.block_bytes);
  }
  CHECK(kiln::ggml_tensor_bytes(GgmlType::Q4_K, 512) == 288);
  CHECK(kiln::ggml_tensor_bytes(GgmlType::F16, 3) == 6);
  CHECK(kiln::ggml_tensor_bytes(GgmlType::Q8_0, 0) == 0);
  CHECK_KILN_ERROR(kiln::ggml_tensor_bytes(GgmlType::Q8_0, 33), "Q8_0", "33 elements", "block size 32");
  CHECK_KILN_ERROR(kiln::ggml_tensor_bytes(GgmlType::Q4_K, -256), "negative");
  CHECK_KILN_ERROR(kiln::ggml_tensor_bytes(GgmlType::F64, INT64_MAX), "overflows");
  // Ids ggml never defined or has removed.
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 42u}) CHECK_FALSE(kiln::ggml_type_from_id(id).has_value());
  CHECK(kiln::ggml_type_from_id(14) == GgmlType::Q6_K);
  CHECK(kiln::ggml_type_name(GgmlType::IQ2_XXS) == "IQ2_XXS");
}

TEST_CASE("dequant: F32, F16 and BF16 elements", "[dequant]") {
  const std::vector<float> f32 = {1.5f, -0.0f, 3e38f};
  std::vector<uint8_t> f32_bytes(12);
  std::memcpy(f32_bytes.data(), f32.data(), 12);
  CHECK(run(GgmlType::F32, f32_bytes, 3) == f32);
  // F16 0x3d55: exponent 15 (bias 15), mantissa 0x155: 1 + 341/1024 = 1.3330078125;
  // 0x8400 = -2^-14 (smallest normal); BF16 0xc2f7 = -123.5.
  CHECK(run(GgmlType::F16, {0x55, 0x3d, 0x00, 0x84}, 2) == std::vector<float>{1.3330078125f, -0x1p-14f});
  CHECK(run(GgmlType::BF16, {0xf7, 0xc2}, 1) == std::vector<float>{-123.5f});
}

TEST_CASE("dequant: hand-built Q8_0 block", "[dequant]") {
  // d = 0.5 (f16 0x3800); qs[j] = 8j - 128, so x[j] = (8j - 128) * 0.5 = 4j - 64.
  std::vector<uint8_t> block(34);
  put_f16(block, 0, 0x3800);
  for (int j = 0; j < 32; ++j) block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(8 * j - 128));
  const auto x = run(GgmlType::Q8_0, block, 32);
  for (int j = 0; j < 32; ++j) CHECK(x[j] == static_cast<float>(4 * j - 64));
  CHECK(x[0] == -64.0f);
  CHECK(x[31] == 60.0f);
}

TEST_CASE("dequant: hand-built Q4_0 block", "[dequant]") {
  // d = 2.0 (f16 0x4000); byte j holds element j in its low nibble (value j) and element j + 16 in
  // its high nibble (value 15 - j). x = (q - 8) * d.
  std::vector<uint8_t> block(18);
  put_f16(block, 0, 0x4000);
  for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto x = run(GgmlType::Q4_0, block, 32);
  for (int j = 0; j < 16; ++j) {
    CHECK(x[j] == static_cast<float>((j - 8) * 2));
    CHECK(x[16 + j] == static_cast<float>((15 - j - 8) * 2));
  }
  CHECK(x[0] == -16.0f);   // (0 - 8) * 2
  CHECK(x[15] == 14.0f);   // (15 - 8) * 2
  CHECK(x[16] == 14.0f);   // high nibble of byte 0 is 15
  CHECK(x[31] == -16.0f);  // high nibble of byte 15 is 0
}

TEST_CASE("dequant: hand-built Q4_1 block", "[dequant]") {
  // d = 0.25 (0x3400), m = -1.0 (0xbc00); same nibbles as the Q4_0 test. x = q * d + m.
  std::vector<uint8_t> block(20);
  put_f16(block, 0, 0x3400);
  put_f16(block, 2, 0xbc00);
  for (int j = 0; j < 16; ++j) block[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto x = run(GgmlType::Q4_1, block, 32);
  for (int j = 0; j < 16; ++j) {
    CHECK(x[j] == j * 0.25f - 1.0f);
    CHECK(x[16 + j] == (15 - j) * 0.25f - 1.0f);
  }
  CHECK(x[0] == -1.0f);
  CHECK(x[15] == 2.75f);  // 15 * 0.25 - 1
  CHECK(x[31] == -1.0f);
}

TEST_CASE("dequant: hand-built Q4_K block", "[dequant]") {
  // d = 1.0 (0x3c00), dmin = 0.5 (0x3800). Sub-block scales sc and mins m (6 bits each):
  const int sc[8] = {1, 2, 3, 4, 33, 40, 63, 5};
  const int m[8] = {0, 1, 2, 3, 17, 48, 60, 7};
  // Packed into 12 bytes: byte j (j<4) = sc[j] | (sc[j+4] >> 4) << 6; byte 4+j = m[j] | (m[j+4] >> 4) << 6;
  // byte 8+j = (sc[j+4] & 15) | (m[j+4] & 15) << 4. E.g. byte 0 = 1 | 2 << 6 = 0x81 (33 >> 4 = 2),
  // byte 10 = (63 & 15) | (60 & 15) << 4 = 0x0f | 0xc0 = 0xcf.
  const uint8_t packed[12] = {0x81, 0x82, 0xc3, 0x04, 0x40, 0xc1, 0xc2, 0x03, 0x11, 0x08, 0xcf, 0x75};
  // qs: 4 groups of 32 bytes; in every group byte l = (l & 15) | (15 - (l & 15)) << 4.
  // Group g's low nibbles are sub-block 2g (elements 64g .. 64g+31), its high nibbles sub-block
  // 2g + 1 (elements 64g+32 .. 64g+63). x = d * sc * q - dmin * m.
  std::vector<uint8_t> block(144);
  put_f16(block, 0, 0x3c00);
  put_f16(block, 2, 0x3800);
  std::memcpy(block.data() + 4, packed, 12);
  for (int g = 0; g < 4; ++g) {
    for (int l = 0; l < 32; ++l) block[16 + 32 * g + l] = static_cast<uint8_t>((l & 15) | ((15 - (l & 15)) << 4));
  }
  const auto x = run(GgmlType::Q4_K, block, 256);
  for (int g = 0; g < 4; ++g) {
    for (int l = 0; l < 32; ++l) {
      INFO("group " << g << " l " << l);
      CHECK(x[64 * g + l] == 1.0f * sc[2 * g] * (l & 15) - 0.5f * m[2 * g]);
      CHECK(x[64 * g + 32 + l] == 1.0f * sc[2 * g + 1] * (15 - (l & 15)) - 0.5f * m[2 * g + 1]);
    }
  }
  CHECK(x[0] == 0.0f);     // sc 1 * q 0 - 0.5 * m 0
  CHECK(x[33] == 27.5f);   // sub-block 1: sc 2 * q 14 - 0.5 * 1
  CHECK(x[71] == 20.0f);   // sub-block 2: sc 3 * q 7 - 0.5 * 2
  CHECK(x[163] == 456.0f); // sub-block 5: sc 40 * q 12 - 0.5 * 48
  CHECK(x[212] == 222.0f); // sub-block 6: sc 63 * q 4 - 0.5 * 60
  CHECK(x[255] == -3.5f);  // sub-block 7: sc 5 * q 0 - 0.5 * 7
}

TEST_CASE("dequant: hand-built Q6_K block", "[dequant]") {
  // Layout: ql[128], qh[64], int8 scales[16], f16 d. d = 0.5 (0x3800);
  // scales[i] = (i + 1) * (+1 for even i, -1 for odd i); ql[b] = b; qh[b] = 0xe4 = 0b11'10'01'00.
  // Element e = 128h + 32k + l (half h, quarter k, l < 32) takes its low 4 bits from
  // ql[64h + 32(k % 2) + l] (low nibble for k < 2, high nibble for k >= 2), its top 2 bits from
  // bits 2k..2k+1 of qh[32h + l] (here: k), and scale scales[8h + 2k + l / 16].
  // x = d * scale * (q - 32).
  std::vector<uint8_t> block(210);
  int8_t scales[16];
  for (int i = 0; i < 16; ++i) scales[i] = static_cast<int8_t>((i + 1) * (i % 2 == 0 ? 1 : -1));
  for (int b = 0; b < 128; ++b) block[b] = static_cast<uint8_t>(b);
  for (int b = 0; b < 64; ++b) block[128 + b] = 0xe4;
  std::memcpy(block.data() + 192, scales, 16);
  put_f16(block, 208, 0x3800);
  const auto x = run(GgmlType::Q6_K, block, 256);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const int byte = 64 * h + 32 * (k % 2) + l;
    const int low = k < 2 ? (byte & 15) : (byte >> 4);
    const int q = (low | (k << 4)) - 32;
    INFO("element " << e);
    CHECK(x[e] == 0.5f * scales[8 * h + 2 * k + l / 16] * q);
  }
  CHECK(x[0] == -16.0f);    // ql[0] = 0, top bits 0: q = -32; scale 1
  CHECK(x[1] == -15.5f);    // q = 1 - 32; scale 1
  CHECK(x[17] == 31.0f);    // q = 1 - 32; scale[1] = -2
  CHECK(x[37] == -16.5f);   // ql[37] low = 5, top bits 1: q = 21 - 32 = -11; scale[2] = 3
  CHECK(x[67] == 0.0f);     // ql[3] high = 0, top bits 2: q = 32 - 32
  CHECK(x[127] == -76.0f);  // ql[63] high = 3, top bits 3: q = 51 - 32 = 19; scale[7] = -8
  CHECK(x[138] == -99.0f);  // ql[74] low = 10: q = -22; scale[8] = 9
  CHECK(x[255] == -184.0f); // ql[127] high = 7, top bits 3: q = 23; scale[15] = -16
}

TEST_CASE("dequant: hand-built Q5_0 block", "[dequant]") {
  // d = 0.5 (0x3800); qh = 0x0000ffff: elements 0-15 get the fifth bit (+16), elements 16-31 do
  // not (their bits are 16-31 of qh). Nibbles as in the Q4_0 test. x = (q - 16) * d.
  std::vector<uint8_t> block(22);
  put_f16(block, 0, 0x3800);
  block[2] = block[3] = 0xff;
  for (int j = 0; j < 16; ++j) block[6 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto x = run(GgmlType::Q5_0, block, 32);
  for (int j = 0; j < 16; ++j) {
    CHECK(x[j] == (j + 16 - 16) * 0.5f);
    CHECK(x[16 + j] == (15 - j - 16) * 0.5f);
  }
  CHECK(x[15] == 7.5f);    // q = 15 | 16 = 31: (31 - 16) * 0.5
  CHECK(x[31] == -8.0f);   // q = 0: (0 - 16) * 0.5
  // The other way round: qh = 0xffff0000 sets the fifth bit of elements 16-31 only.
  block[2] = block[3] = 0;
  block[4] = block[5] = 0xff;
  const auto y = run(GgmlType::Q5_0, block, 32);
  CHECK(y[0] == -8.0f);    // q = 0
  CHECK(y[16] == 7.5f);    // q = 15 | 16
}

TEST_CASE("dequant: hand-built Q3_K block", "[dequant]") {
  // d = 0.25 (0x3400). 16 6-bit scales s[j] = j + 24 packed into 12 bytes: low nibbles of s[0..7]
  // in the low nibbles of bytes 0-7, of s[8..15] in their high nibbles; top 2 bits of s[j] at bits
  // 2(j / 4) of byte 8 + j % 4. Scales are used as s - 32, i.e. j - 8.
  int8_t s[16];
  for (int j = 0; j < 16; ++j) s[j] = static_cast<int8_t>(j + 24);
  std::vector<uint8_t> block(110);
  for (int j = 0; j < 8; ++j) block[96 + j] = static_cast<uint8_t>((s[j] & 15) | ((s[j + 8] & 15) << 4));
  for (int j = 0; j < 16; ++j) block[96 + 8 + j % 4] |= static_cast<uint8_t>((s[j] >> 4) << (2 * (j / 4)));
  put_f16(block, 108, 0x3400);
  // qs (32 bytes per half): byte b = 0b11'10'01'00, so read k (shift 2k) of every byte gives k.
  for (int b = 0; b < 64; ++b) block[32 + b] = 0xe4;
  // hmask[l] = 0x55: the high bit is set for even reads (m = 1, 4, 16, 64) and clear for odd ones,
  // which subtract 4.
  for (int l = 0; l < 32; ++l) block[l] = 0x55;
  const auto x = run(GgmlType::Q3_K, block, 256);
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, read = (e % 128) / 32, part = (e % 32) / 16;
    const int sub = 8 * half + 2 * read + part;  // the 16-element sub-block: its scale
    const int m = 4 * half + read;               // which bit of hmask
    const int q = read - (m % 2 == 0 ? 0 : 4);
    INFO("element " << e);
    CHECK(x[e] == 0.25f * (s[sub] - 32) * q);
  }
  CHECK(x[0] == 0.0f);      // read 0: q = 0
  CHECK(x[40] == 4.5f);     // read 1, part 0: sub-block 2 (scale -6), q = 1 - 4 = -3
  CHECK(x[255] == -1.75f);  // half 1, read 3, part 1: sub-block 15 (scale 7), q = 3 - 4 = -1 (bit 7 clear)
}

TEST_CASE("dequant: bit-exact with gguf-py on random blocks", "[dequant]") {
  namespace E = dequant_expected;
  const auto check = [](GgmlType type, std::span<const uint8_t> blocks, std::span<const uint32_t> expected) {
    INFO(kiln::ggml_type_name(type));
    std::vector<float> x(expected.size(), -12345.0f);
    kiln::dequantize(type, std::as_bytes(blocks), x);
    size_t mismatches = 0;
    for (size_t i = 0; i < x.size(); ++i) mismatches += std::bit_cast<uint32_t>(x[i]) != expected[i];
    CHECK(mismatches == 0);
    CHECK(std::bit_cast<uint32_t>(x[7]) == expected[7]);
  };
  check(GgmlType::Q8_0, E::q8_0_blocks, E::q8_0_values);
  check(GgmlType::Q4_0, E::q4_0_blocks, E::q4_0_values);
  check(GgmlType::Q4_1, E::q4_1_blocks, E::q4_1_values);
  check(GgmlType::Q4_K, E::q4_k_blocks, E::q4_k_values);
  check(GgmlType::Q6_K, E::q6_k_blocks, E::q6_k_values);
  check(GgmlType::Q5_0, E::q5_0_blocks, E::q5_0_values);
  check(GgmlType::Q5_1, E::q5_1_blocks, E::q5_1_values);
  check(GgmlType::Q2_K, E::q2_k_blocks, E::q2_k_values);
  check(GgmlType::Q3_K, E::q3_k_blocks, E::q3_k_values);
  check(GgmlType::Q5_K, E::q5_k_blocks, E::q5_k_values);
}

TEST_CASE("dequant: unsupported types and size mismatches", "[dequant]") {
  std::vector<float> out(256);
  const std::vector<std::byte> iq4xs(136);
  CHECK_KILN_ERROR(kiln::dequantize(GgmlType::IQ4_XS, iq4xs, out), "IQ4_XS", "cannot dequantize", "Q5_K");
  const std::vector<std::byte> i8(256);
  CHECK_KILN_ERROR(kiln::dequantize(GgmlType::I8, i8, out), "I8");
  CHECK_FALSE(kiln::can_dequantize(GgmlType::IQ2_XS));
  CHECK(kiln::can_dequantize(GgmlType::Q6_K));
  const std::vector<std::byte> short_q8(33);
  std::vector<float> thirty_two(32);
  CHECK_KILN_ERROR(kiln::dequantize(GgmlType::Q8_0, short_q8, thirty_two), "Q8_0", "need 34 bytes", "got 33");
  std::vector<float> partial(31);
  CHECK_KILN_ERROR(kiln::dequantize(GgmlType::Q8_0, std::vector<std::byte>(34), partial), "not a multiple");
}
