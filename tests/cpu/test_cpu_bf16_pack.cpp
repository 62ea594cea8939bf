// bf16 rows packed in 12 bits a value (runtime/cpu/bf16_pack.hpp): every value comes back as
// the same bits (zeros, subnormals, both signs, the largest exponents, blocks that span too many
// binades and stay as they are), a matrix that would not shrink is left alone, and the kernel on
// the packed rows gives the bf16 kernel's bits for every token count.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "runtime/cpu/bf16_avx512.hpp"
#include "runtime/cpu/bf16_pack.hpp"

using namespace kiln;

namespace {

// bf16 bits of normal(0, scale) values rounded toward zero (the loader's file bits are any), with
// the odd ones the layout must keep: every 97th a zero, every 89th a subnormal, every 331st a
// value 2^-24 of the scale (beyond the 15 binades: its block stays raw), row 3's first block
// near bf16's largest, and row 5 all zeros.
std::vector<uint16_t> make_rows(int64_t n, int64_t k, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> value(0.0f, scale);
  std::vector<uint16_t> rows(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n * k; ++i) {
    float v = value(rng);
    if (i % 331 == 7) v = scale * 0x1p-24f;
    uint32_t bits = 0;
    std::memcpy(&bits, &v, 4);
    uint16_t b = static_cast<uint16_t>(bits >> 16);
    if (i % 97 == 3) b = i % 2 ? 0x8000 : 0x0000;
    if (i % 89 == 5) b = static_cast<uint16_t>(0x0001 + i % 0x7F);
    rows[static_cast<size_t>(i)] = b;
  }
  if (n > 3) {
    for (int64_t c = 0; c < 32; ++c) rows[static_cast<size_t>(3 * k + c)] = static_cast<uint16_t>(0x7F00 | c | (c % 2) << 15);
  }
  if (n > 5) std::fill(rows.begin() + 5 * k, rows.begin() + 6 * k, uint16_t{0});
  return rows;
}

}  // namespace

TEST_CASE("bf16 packing: every value back as its bits, raw blocks included, and a matrix that would not shrink refused",
          "[cpu]") {
  if (!cpu::packed_bf16_available()) {
    WARN("no AVX-512 BF16 with VBMI here: bf16 rows are not packed, not tested");
    return;
  }
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{4, 256}, {8, 64}, {12, 2048}, {64, 576}}) {
    INFO("[" << n << ", " << k << "]");
    const std::vector<uint16_t> rows = make_rows(n, k, 0.02f, static_cast<uint32_t>(n + k));
    std::vector<std::byte> packed;
    const int64_t bytes = pack_bf16(rows.data(), n, k, packed);
    REQUIRE(bytes > 0);
    CHECK(bytes < 2 * n * k);
    CHECK(bytes >= packed_bf16_chunks_bytes(n, k));
    int64_t raw = 0;  // blocks kept as stored
    for (int64_t c = 0; c < packed_bf16_chunks_bytes(n, k); c += kPackedChunkBytes) {
      for (int r = 0; r < kPackedRows; ++r) raw += static_cast<uint8_t>(packed[static_cast<size_t>(c + r)]) == kRawBlock;
    }
    CHECK(raw > 0);
    CHECK(bytes == packed_bf16_chunks_bytes(n, k) + raw * kPackedRawBytes);
    packed.resize(packed.size() + 64);  // the kernel's slot loads read 16 bytes past the last
    int64_t wrong = 0;
    std::vector<uint16_t> row(static_cast<size_t>(k));
    for (int64_t r = 0; r < n; ++r) {
      unpack_bf16_row(packed.data(), n, k, r, row.data());
      wrong += std::memcmp(row.data(), rows.data() + r * k, static_cast<size_t>(k) * 2) != 0;
    }
    CHECK(wrong == 0);
  }
  // Every block spanning 2^-100 .. 1: all raw, more bytes than the rows.
  std::vector<uint16_t> wide(8 * 64, 0x3F80);  // 1.0
  for (size_t i = 0; i < wide.size(); i += 32) wide[i] = 0x0D80;  // 2^-100
  std::vector<std::byte> packed;
  CHECK(pack_bf16(wide.data(), 8, 64, packed) == 0);
}

TEST_CASE("cpu kernels: packed bf16 rows give the bf16 kernel's bits", "[cpu]") {
  if (!cpu::packed_bf16_available()) {
    WARN("no AVX-512 BF16 with VBMI here: not tested");
    return;
  }
  struct Shape {
    int64_t n, k, tokens;
  };
  // One token (the streaming kernel), a tile of tokens and some (6: the bf16 kernel's token tile),
  // past one chunk of tokens (128 of 2,048 values), and SmolLM2's rows of 576.
  const Shape shapes[] = {{4, 256, 1}, {64, 2048, 1}, {36, 576, 1}, {36, 576, 7}, {8, 2048, 130}, {12, 96, 6}};
  for (const Shape& sh : shapes) {
    for (const bool accumulate : {false, true}) {
      INFO("[" << sh.n << ", " << sh.k << "] × " << sh.tokens << " tokens" << (accumulate ? " +=" : " ="));
      const std::vector<uint16_t> rows = make_rows(sh.n, sh.k, 0.05f, static_cast<uint32_t>(sh.n * 7 + sh.k));
      std::vector<std::byte> packed;
      REQUIRE(pack_bf16(rows.data(), sh.n, sh.k, packed) > 0);
      packed.resize(static_cast<size_t>(2 * sh.n * sh.k));  // as the loader leaves it: in the rows' allocation
      std::mt19937 rng(static_cast<uint32_t>(sh.tokens));
      std::normal_distribution<float> value(0.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(sh.tokens * sh.k)), start(static_cast<size_t>(sh.tokens * sh.n));
      for (float& v : x) v = value(rng);
      for (float& v : start) v = value(rng);
      std::vector<float> want = accumulate ? start : std::vector<float>(start.size(), NAN);
      std::vector<float> got = want;
      cpu::linear_bf16_avx512(x.data(), rows.data(), sh.n, sh.k, want.data(), sh.tokens, accumulate);
      cpu::linear_bf16_packed_avx512(x.data(), packed.data(), sh.n, sh.k, got.data(), sh.tokens, accumulate);
      CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
    }
  }
}
