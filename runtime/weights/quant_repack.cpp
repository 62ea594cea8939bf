#include "runtime/weights/quant_repack.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "runtime/core/dtype.hpp"
#include "runtime/core/error.hpp"
#include "runtime/weights/dequant.hpp"
#include "runtime/weights/float_convert.hpp"

namespace kiln {

namespace {

// A 32-value ggml block of Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1: fp16 d first, then Q4_1's and Q5_1's
// fp16 m, then Q5_0's and Q5_1's 32 fifth bits, then the quants.
int64_t quants_at(MatrixFormat f) { return quant_block_scale_bytes(f) + (has_fifth_bits(f) ? 4 : 0); }
bool has_min(MatrixFormat f) { return quant_block_scale_bytes(f) > 2; }  // Q4_1, Q5_1: the scale's d and m
int64_t block_bytes(MatrixFormat f) { return quants_at(f) + (f == MatrixFormat::q8_0 ? 32 : 16); }

// Where block b's quants for lane q start in row r, and where its scale is.
struct BlockPlace {
  int64_t lane_bytes;  // offset of lane q's 16 bytes of the block's group, from the matrix start
  int64_t scale;       // offset of the block's fp16 scale (Q4_1, Q5_1: and min; Q4_K, Q5_K: of its
                       // super-block's 16-byte header)
};

BlockPlace place(MatrixFormat f, int64_t n, int64_t k, int64_t r, int64_t b, int64_t q) {
  const int64_t g = quant_group_blocks(f), groups = quant_row_groups(f, k);
  const int64_t group = b / g;
  const int64_t scale = has_super_headers(f) ? (r * (k / kQ4kSuperValues) + b / 8) * kQ4kHeaderBytes
                                             : (r * groups * g + b) * quant_block_scale_bytes(f);
  return {(r * groups + group) * kQuantGroupBytes + q * 16, quant_after_high_offset(f, n, k) + scale};
}

// Where lane q's word of fifth bits (Q5_0, Q5_1, Q5_K) for row r's group of block b is
// (weight_matrix.hpp), and the bit of the block's column 8q + i in it: pair p = i / 2 at 4 (b % 4)
// + p, its second column 16 higher.
int64_t q5_high_word(MatrixFormat f, int64_t n, int64_t k, int64_t r, int64_t b, int64_t q) {
  return quant_scales_offset(f, n, k) + (r * quant_row_groups(f, k) + b / 4) * kQ5HighGroupBytes + q * 4;
}
int q5_high_shift(int64_t b, int64_t i) { return static_cast<int>(4 * (b % 4) + i / 2 + 16 * (i % 2)); }

uint8_t nibble(const std::byte* qs, int64_t c) {  // ggml Q4_0: column c < 16 low nibble of qs[c], else high of qs[c - 16]
  const auto v = static_cast<uint8_t>(qs[c % 16]);
  return c < 16 ? v & 0x0F : v >> 4;
}

// Bit position of column 8q + i (i = 0..7) in lane q's Q4_0 word: pair p = i / 2 at 4p, the pair's
// second column 16 bits higher.
int q4_shift(int64_t i) { return static_cast<int>(4 * (i / 2) + 16 * (i % 2)); }

// Block b of row r's fifth bits into their area, fifth(c) being column c's (0 or 1).
template <typename Fifth>
void put_fifth_bits(MatrixFormat f, std::byte* matrix, int64_t n, int64_t k, int64_t r, int64_t b, Fifth&& fifth) {
  for (int64_t q = 0; q < 4; ++q) {
    uint32_t high;
    std::memcpy(&high, matrix + q5_high_word(f, n, k, r, b, q), 4);
    for (int64_t i = 0; i < 8; ++i) high |= static_cast<uint32_t>(fifth(8 * q + i)) << q5_high_shift(b, i);
    std::memcpy(matrix + q5_high_word(f, n, k, r, b, q), &high, 4);  // little-endian, as the GPU reads it
  }
}

// Column 8q + i's fifth bit of block b of row r.
int fifth_bit(MatrixFormat f, const std::byte* matrix, int64_t n, int64_t k, int64_t r, int64_t b, int64_t q,
              int64_t i) {
  uint32_t high;
  std::memcpy(&high, matrix + q5_high_word(f, n, k, r, b, q), 4);
  return static_cast<int>((high >> q5_high_shift(b, i)) & 1);
}

}  // namespace

std::optional<MatrixFormat> matrix_format_of(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0: return MatrixFormat::q8_0;
    case GgmlType::Q4_0: return MatrixFormat::q4_0;
    case GgmlType::Q4_1: return MatrixFormat::q4_1;
    case GgmlType::Q5_0: return MatrixFormat::q5_0;
    case GgmlType::Q4_K: return MatrixFormat::q4_k;
    case GgmlType::Q6_K: return MatrixFormat::q6_k;
    case GgmlType::Q5_1: return MatrixFormat::q5_1;
    case GgmlType::Q5_K: return MatrixFormat::q5_k;
    case GgmlType::Q2_K: return MatrixFormat::q2_k;
    case GgmlType::Q3_K: return MatrixFormat::q3_k;
    default: return std::nullopt;
  }
}

const char* matrix_format_name(MatrixFormat format) {
  switch (format) {
    case MatrixFormat::bf16: return "bf16";
    case MatrixFormat::q8_0: return "Q8_0";
    case MatrixFormat::q4_0: return "Q4_0";
    case MatrixFormat::q4_1: return "Q4_1";
    case MatrixFormat::q5_0: return "Q5_0";
    case MatrixFormat::q5_1: return "Q5_1";
    case MatrixFormat::q4_k: return "Q4_K";
    case MatrixFormat::q5_k: return "Q5_K";
    case MatrixFormat::q6_k: return "Q6_K";
    case MatrixFormat::q2_k: return "Q2_K";
    case MatrixFormat::q3_k: return "Q3_K";
    case MatrixFormat::fp8: return "FP8";
    case MatrixFormat::f32: return "f32";
    case MatrixFormat::bf16_packed: return "bf16 (12-bit packed)";
  }
  return "?";
}

GgmlType ggml_type_of(MatrixFormat f) {
  switch (f) {
    case MatrixFormat::q8_0: return GgmlType::Q8_0;
    case MatrixFormat::q4_0: return GgmlType::Q4_0;
    case MatrixFormat::q4_1: return GgmlType::Q4_1;
    case MatrixFormat::q5_0: return GgmlType::Q5_0;
    case MatrixFormat::q5_1: return GgmlType::Q5_1;
    case MatrixFormat::q2_k: return GgmlType::Q2_K;
    case MatrixFormat::q3_k: return GgmlType::Q3_K;
    case MatrixFormat::q4_k: return GgmlType::Q4_K;
    case MatrixFormat::q5_k: return GgmlType::Q5_K;
    case MatrixFormat::q6_k: return GgmlType::Q6_K;
    default: fail("internal: ", matrix_format_name(f), " is no GGUF block type");
  }
}

namespace {

// Lane q's Q4_0-layout word of a block whose column c's nibble is nib(c).
template <typename Nibble>
uint32_t lane_word(int64_t q, Nibble&& nib) {
  uint32_t word = 0;
  for (int64_t i = 0; i < 8; ++i) word |= static_cast<uint32_t>(nib(8 * q + i)) << q4_shift(i);
  return word;
}

// The super-blocks of row r of an [n, k] matrix a K-quant row of `type` fills (its size checked).
int64_t super_blocks(GgmlType type, std::span<const std::byte> ggml_row, int64_t n, int64_t k, int64_t r) {
  const int64_t supers = k / kQ4kSuperValues;
  if (k % kQ4kSuperValues != 0 || static_cast<int64_t>(ggml_row.size()) != supers * static_cast<int64_t>(ggml_block_bytes(type)) ||
      r < 0 || r >= n) {
    fail("internal: repack_row of ", ggml_type_name(type), ": ", ggml_row.size(), " bytes for row ", r, " of [", n, ", ",
         k, "]");
  }
  return supers;
}

// The 6-bit quant u of value v (0..255) of a ggml block_q6_K (ql[128], qh[64], int8 scales[16],
// fp16 d): in half h = v / 128, with l = v % 32 and quarter t = (v % 128) / 32, the low 4 bits in
// ql[64h + l + 32 (t % 2)] (low nibble for t < 2, else high), the high 2 in qh[32h + l] >> 2t.
uint8_t q6k_quant(const std::byte* super, int64_t v) {
  const int64_t h = v / 128, l = v % 32, t = (v % 128) / 32;
  const auto lo = static_cast<uint8_t>(super[64 * h + l + 32 * (t % 2)]);
  const auto hi = static_cast<uint8_t>(super[128 + 32 * h + l]);
  return static_cast<uint8_t>(((t < 2 ? lo & 0x0F : lo >> 4) | (((hi >> (2 * t)) & 3) << 4)));
}

// ggml's 2-bit quant of value v (0..255) of a Q2_K / Q3_K super-block's 64 bytes qs: in half h =
// v / 128, bits 2 ((v % 128) / 32) of byte 32h + v % 32.
uint32_t two_bit_quant(const std::byte* qs, int64_t v) {
  return (static_cast<uint8_t>(qs[32 * (v / 128) + v % 32]) >> (2 * ((v % 128) / 32))) & 3u;
}

// The unsigned quant of value v (0..255) of a K-quant super-block (Q3_K's third bit as 4).
int k_quant_value(MatrixFormat f, const std::byte* super, int64_t v) {
  switch (f) {
    case MatrixFormat::q6_k: return q6k_quant(super, v);
    case MatrixFormat::q2_k: return static_cast<int>(two_bit_quant(super + 16, v));
    case MatrixFormat::q3_k:
      return static_cast<int>(two_bit_quant(super + 32, v)) | ((static_cast<uint8_t>(super[v % 32]) >> (v / 32)) & 1) << 2;
    default: {  // Q4_K, Q5_K: sub-block 2i in the low nibbles of qs[32i..], 2i + 1 in the high; Q5_K's qh first
      const bool q5 = f == MatrixFormat::q5_k;
      const int64_t j = v / 32, c = v % 32;
      const auto byte = static_cast<uint8_t>(super[(q5 ? 48 : 16) + 32 * (j / 2) + c]);
      const int fifth = q5 ? (static_cast<uint8_t>(super[16 + c]) >> j) & 1 : 0;  // bit j of qh[c]
      return (j % 2 == 0 ? byte & 0x0F : byte >> 4) | fifth << 4;
    }
  }
}

// Where a K-quant super-block keeps its fp16 d and dmin.
int64_t k_quant_d_at(MatrixFormat f) {
  switch (f) {
    case MatrixFormat::q2_k: return 80;
    case MatrixFormat::q3_k: return 108;
    case MatrixFormat::q6_k: return 208;
    default: return 0;
  }
}

// A Q4_K or Q5_K row: each super-block's 16-byte header (d, dmin, packed scales) into the scales
// area as stored, its 8 sub-blocks as blocks of 4-bit quants (ggml's qs: sub-block 2i in the low
// nibbles of bytes 32i..32i+31, sub-block 2i + 1 in their high nibbles); Q5_K's qh (32 bytes after
// the header: bit j of byte c is sub-block j's column c's fifth bit) into the fifth bits' area.
void repack_super_header_row(MatrixFormat f, std::span<const std::byte> ggml_row, int64_t n, int64_t k, int64_t r,
                             std::byte* matrix) {
  const GgmlType type = f == MatrixFormat::q5_k ? GgmlType::Q5_K : GgmlType::Q4_K;
  const int64_t super_bytes = ggml_block_bytes(type), supers = super_blocks(type, ggml_row, n, k, r);
  for (int64_t sb = 0; sb < supers; ++sb) {
    const std::byte* super = ggml_row.data() + sb * super_bytes;
    std::memcpy(matrix + place(f, n, k, r, sb * 8, 0).scale, super, kQ4kHeaderBytes);
    for (int64_t j = 0; j < 8; ++j) {
      const int64_t b = sb * 8 + j;
      const auto u = [&](int64_t c) { return k_quant_value(f, super, 32 * j + c); };
      if (f == MatrixFormat::q5_k) put_fifth_bits(f, matrix, n, k, r, b, [&](int64_t c) { return u(c) >> 4; });
      for (int64_t q = 0; q < 4; ++q) {
        const uint32_t word = lane_word(q, [&](int64_t c) { return u(c) & 0x0F; });
        std::memcpy(matrix + place(f, n, k, r, b, q).lane_bytes + (b % 4) * 4, &word, 4);
      }
    }
  }
}

// Bits of a 32-bit word of a matrix in the GPU layout (little-endian, as the GPU reads it): the
// word's byte offset from the matrix start and the bits' lowest position.
struct WordBits {
  int64_t word;
  int shift;
};
void or_bits(std::byte* matrix, WordBits at, uint32_t bits) {
  uint32_t word;
  std::memcpy(&word, matrix + at.word, 4);
  word |= bits << at.shift;
  std::memcpy(matrix + at.word, &word, 4);
}
uint32_t bits_at(const std::byte* matrix, WordBits at, uint32_t mask) {
  uint32_t word;
  std::memcpy(&word, matrix + at.word, 4);
  return (word >> at.shift) & mask;
}

// Column c (0..31) of a block in Q6_K's lane columns (Q6_K, Q2_K, Q3_K): lane q = (c % 16) / 4
// holds it as pair p = 2 (c / 16) + (c % 4) / 2, first (second = 0) or second.
struct LaneColumn {
  int64_t q;
  int p, second;
};
LaneColumn half_scale_lane(int64_t c) {
  return {(c % 16) / 4, static_cast<int>(2 * (c / 16) + (c % 4) / 2), static_cast<int>(c % 2)};
}

// Where column c (0..31) of block b of row r of an [n, k] Q6_K matrix lives (weight_matrix.hpp):
// its low 4 bits in its lane's word of the block, its high 2 in the high bits' area.
struct Q6kBits {
  WordBits lo, hi;
};
Q6kBits q6k_bits(int64_t n, int64_t k, int64_t r, int64_t b, int64_t c) {
  const MatrixFormat f = MatrixFormat::q6_k;
  const LaneColumn l = half_scale_lane(c);
  return {{place(f, n, k, r, b, l.q).lane_bytes + (b % 4) * 4, 4 * l.p + 16 * l.second},
          {quant_scales_offset(f, n, k) + (r * quant_row_groups(f, k) + b / 4) * kQ6kHighGroupBytes + l.q * 8 +
               (b % 4) / 2 * 4,
           8 * static_cast<int>(b % 2) + 2 * l.p + 16 * l.second}};
}

// Where the 2-bit quant of column c (0..31) of block b of row r of an [n, k] Q2_K / Q3_K matrix
// lives (8 blocks a group: block b % 8 of its group in word (b % 8) / 2 of the lane's 16 bytes),
// and Q3_K's third bit (block b % 8 in word (b % 8) / 4 of the lane's 8 bytes of third bits).
WordBits two_bit_place(MatrixFormat f, int64_t n, int64_t k, int64_t r, int64_t b, int64_t c) {
  const LaneColumn l = half_scale_lane(c);
  return {place(f, n, k, r, b, l.q).lane_bytes + (b % 8) / 2 * 4, 8 * static_cast<int>(b % 2) + 2 * l.p + 16 * l.second};
}
WordBits q3k_third_bit(int64_t n, int64_t k, int64_t r, int64_t b, int64_t c) {
  const MatrixFormat f = MatrixFormat::q3_k;
  const LaneColumn l = half_scale_lane(c);
  return {quant_scales_offset(f, n, k) + (r * quant_row_groups(f, k) + b / 8) * kQ6kHighGroupBytes + l.q * 8 +
              (b % 8) / 4 * 4,
          4 * static_cast<int>(b % 4) + l.p + 16 * l.second};
}

// A Q6_K row: the low 4 bits of each value as Q4_K's nibbles (in Q6_K's lane columns), the high 2
// into the high-bits area, each super-block's 16 scales and d into theirs, as stored.
void repack_q6_k_row(std::span<const std::byte> ggml_row, int64_t n, int64_t k, int64_t r, std::byte* matrix) {
  const int64_t super_bytes = ggml_block_bytes(GgmlType::Q6_K), supers = super_blocks(GgmlType::Q6_K, ggml_row, n, k, r);
  for (int64_t sb = 0; sb < supers; ++sb) {
    const std::byte* super = ggml_row.data() + sb * super_bytes;
    std::memcpy(matrix + quant_after_high_offset(MatrixFormat::q6_k, n, k) + (r * supers + sb) * kQ6kScaleBytes,
                super + 192, kQ6kScaleBytes);
    std::memcpy(matrix + q6k_d_offset(n, k) + (r * supers + sb) * 2, super + k_quant_d_at(MatrixFormat::q6_k), 2);
    for (int64_t j = 0; j < 8; ++j) {
      const int64_t b = sb * 8 + j;
      for (int64_t c = 0; c < 32; ++c) {
        const uint8_t u = q6k_quant(super, 32 * j + c);
        const Q6kBits at = q6k_bits(n, k, r, b, c);
        or_bits(matrix, at.lo, u & 0x0F);
        or_bits(matrix, at.hi, u >> 4);
      }
    }
  }
}

// A Q2_K row (ggml's block_q2_K: scales[16], qs[64], fp16 d, fp16 dmin) or a Q3_K one (hmask[32],
// qs[64], scales[12], fp16 d): each super-block is a group, its 2-bit quants into the group
// bytes, Q3_K's third bits (bit v / 32 of hmask[v % 32] for value v) into their area, the scales
// (and Q2_K's mins, d and dmin; Q3_K's d) into theirs as stored.
void repack_two_bit_row(MatrixFormat f, std::span<const std::byte> ggml_row, int64_t n, int64_t k, int64_t r,
                        std::byte* matrix) {
  const bool q3 = f == MatrixFormat::q3_k;
  const GgmlType type = q3 ? GgmlType::Q3_K : GgmlType::Q2_K;
  const int64_t super_bytes = ggml_block_bytes(type), supers = super_blocks(type, ggml_row, n, k, r);
  const int64_t scales_at = quant_after_high_offset(f, n, k);
  for (int64_t sb = 0; sb < supers; ++sb) {
    const std::byte* super = ggml_row.data() + sb * super_bytes;
    const int64_t at = r * supers + sb;  // the super-block's index in each scales area
    if (q3) {
      std::memcpy(matrix + scales_at + at * kQ3kScaleLowBytes, super + 96, kQ3kScaleLowBytes);
      std::memcpy(matrix + q3k_scale_high_offset(n, k) + at * kQ3kScaleHighBytes, super + 104, kQ3kScaleHighBytes);
      std::memcpy(matrix + q3k_d_offset(n, k) + at * 2, super + k_quant_d_at(f), 2);
    } else {
      std::memcpy(matrix + scales_at + at * kQ2kScaleBytes, super, kQ2kScaleBytes);
      std::memcpy(matrix + q2k_d_offset(n, k) + at * 4, super + k_quant_d_at(f), 4);  // d, dmin
    }
    for (int64_t v = 0; v < kQ4kSuperValues; ++v) {
      const int64_t b = sb * 8 + v / 32, c = v % 32;
      const auto u = static_cast<uint32_t>(k_quant_value(f, super, v));
      or_bits(matrix, two_bit_place(f, n, k, r, b, c), u & 3u);
      if (q3) or_bits(matrix, q3k_third_bit(n, k, r, b, c), u >> 2);
    }
  }
}

}  // namespace

void repack_row(MatrixFormat f, std::span<const std::byte> ggml_row, int64_t n, int64_t k, int64_t r,
                std::byte* matrix) {
  if (has_super_headers(f)) return repack_super_header_row(f, ggml_row, n, k, r, matrix);
  if (f == MatrixFormat::q6_k) return repack_q6_k_row(ggml_row, n, k, r, matrix);
  if (has_two_bit_quants(f)) return repack_two_bit_row(f, ggml_row, n, k, r, matrix);
  if (f != MatrixFormat::q8_0 && f != MatrixFormat::q4_0 && f != MatrixFormat::q4_1 && f != MatrixFormat::q5_0 &&
      f != MatrixFormat::q5_1) {
    fail("internal: repack_row of ", matrix_format_name(f), " for the GPU");
  }
  const int64_t blocks = k / kQuantBlockValues;
  if (k % kQuantBlockValues != 0 || static_cast<int64_t>(ggml_row.size()) != blocks * block_bytes(f) || r < 0 ||
      r >= n) {
    fail("internal: repack_row of ", matrix_format_name(f), ": ", ggml_row.size(), " bytes for row ", r, " of [", n,
         ", ", k, "]");
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const std::byte* block = ggml_row.data() + b * block_bytes(f);
    const std::byte* qs = block + quants_at(f);
    const int64_t in_group = b % quant_group_blocks(f);
    for (int64_t q = 0; q < 4; ++q) {
      const BlockPlace p = place(f, n, k, r, b, q);
      if (q == 0) std::memcpy(matrix + p.scale, block, static_cast<size_t>(quant_block_scale_bytes(f)));  // d (and m)
      if (f == MatrixFormat::q8_0) {
        std::memcpy(matrix + p.lane_bytes + in_group * 8, qs + q * 8, 8);
        continue;
      }
      const uint32_t word = lane_word(q, [&](int64_t c) { return nibble(qs, c); });
      std::memcpy(matrix + p.lane_bytes + in_group * 4, &word, 4);  // little-endian, as the GPU reads it
    }
    if (has_fifth_bits(f)) {  // ggml's qh, before the quants: bit c is column c's fifth bit
      uint32_t qh;
      std::memcpy(&qh, qs - 4, 4);
      put_fifth_bits(f, matrix, n, k, r, b, [&](int64_t c) { return (qh >> c) & 1u; });
    }
  }
}

namespace {

// Bytes of a row of k values as the file stores them (-1: k is not whole blocks).
int64_t ggml_row_bytes(MatrixFormat f, int64_t k) {
  const GgmlType type = ggml_type_of(f);
  const auto values = static_cast<int64_t>(ggml_block_size(type));
  return k % values == 0 ? k / values * static_cast<int64_t>(ggml_block_bytes(type)) : -1;
}

// The bytes of row r's group of 16 rows, and the byte of a record holding column c (0..31) of lane
// `lane` (weight_matrix.hpp): Q8_0 its own byte, the 4-bit formats c < 16 in the low nibble and c
// ≥ 16 in the high one of the same byte, the 2-bit formats' column 4·(4·v + s) + i at bits 2·s of
// byte 4·lane + i of vector v.
std::byte* cpu_group(MatrixFormat f, std::byte* matrix, int64_t k, int64_t r) {
  return matrix + (r / kCpuRowGroup) * cpu_matrix_bytes(f, kCpuRowGroup, k);
}
int64_t cpu_quant_byte(MatrixFormat f, int64_t lane, int64_t c) {
  const int64_t vector = f == MatrixFormat::q8_0 ? c / 4 : has_two_bit_quants(f) ? c / 16 : (c % 16) / 4;
  return 64 * vector + 4 * lane + c % 4;
}
int cpu_quant_shift(MatrixFormat f, int64_t c) {
  if (has_two_bit_quants(f)) return static_cast<int>(2 * ((c / 4) % 4));
  return f != MatrixFormat::q8_0 && c >= 16 ? 4 : 0;
}

float f16_value(const std::byte* p) {
  float v = 0.0f;
  f16_elements_to_f32(p, std::span<float>(&v, 1));
  return v;
}

// Sub-block j's scale (and min) of a K-quant super-block as ggml stores it: Q4_K / Q5_K j of 8
// (6 bits each), Q2_K j of 16 (4 bits each), Q3_K j of 16 (6 bits, less 32), Q6_K j of 16 (int8).
SubBlockBits k_quant_sub_block(MatrixFormat f, const std::byte* super, int64_t j) {
  switch (f) {
    case MatrixFormat::q2_k: {
      const auto byte = static_cast<uint8_t>(super[j]);
      return {byte & 0x0F, byte >> 4};
    }
    case MatrixFormat::q3_k: return {q3_k_scale(super + 96, static_cast<size_t>(j)) - 32, 0};
    case MatrixFormat::q6_k: return {static_cast<int8_t>(super[192 + j]), 0};
    default: return q4_k_sub_block_bits(super, static_cast<size_t>(j));
  }
}

}  // namespace

void repack_cpu_row(MatrixFormat f, std::span<const std::byte> ggml_row, int64_t k, int64_t r, std::byte* matrix) {
  if (!is_cpu_block_format(f) || k % kQuantBlockValues != 0 || (is_k_quant(f) && k % kQ4kSuperValues != 0) ||
      static_cast<int64_t>(ggml_row.size()) != ggml_row_bytes(f, k)) {
    fail("internal: repack_cpu_row of ", matrix_format_name(f), ": ", ggml_row.size(), " bytes for a row of ", k);
  }
  const int64_t lane = r % kCpuRowGroup, width = cpu_scale_bytes(f);
  const auto super_bytes = static_cast<int64_t>(ggml_block_bytes(ggml_type_of(f)));  // K-quants: a super-block's
  std::byte* group = cpu_group(f, matrix, k, r);
  for (int64_t b = 0; b < k / kQuantBlockValues; ++b) {
    std::byte* rec = group + cpu_record_at(f, b);
    int q[kQuantBlockValues];  // the block's quants as the file means them (Q8_0 signed, else unsigned)
    if (is_k_quant(f)) {
      const std::byte* super = ggml_row.data() + (b / 8) * super_bytes;
      if (b % 8 == 0) {  // the super-block's header: d, then -dmin (the fp16 sign flipped)
        std::byte* header = group + cpu_header_at(f, b);
        std::memcpy(header + 2 * lane, super + k_quant_d_at(f), 2);
        if (cpu_has_min(f)) {
          uint16_t dmin;
          std::memcpy(&dmin, super + k_quant_d_at(f) + 2, 2);
          dmin ^= 0x8000;  // -dmin, exactly
          std::memcpy(header + 2 * kCpuRowGroup + 2 * lane, &dmin, 2);
        }
      }
      const bool half = has_half_block_scales(f);
      for (int64_t h = 0; h < (half ? 2 : 1); ++h) {  // sub-block j: columns 16h.. (or all 32)
        const SubBlockBits sub = k_quant_sub_block(f, super, half ? 2 * (b % 8) + h : b % 8);
        rec[cpu_scales_at(f) + kCpuRowGroup * h + lane] = std::byte(static_cast<uint8_t>(static_cast<int8_t>(sub.scale)));
        if (cpu_has_min(f)) rec[cpu_mins_at(f) + kCpuRowGroup * h + lane] = std::byte(static_cast<uint8_t>(sub.min));
      }
      for (int c = 0; c < kQuantBlockValues; ++c) q[c] = k_quant_value(f, super, 32 * (b % 8) + c);
    } else {
      const std::byte* block = ggml_row.data() + b * block_bytes(f);
      std::memcpy(rec + cpu_scales_at(f) + width * lane, block, 2);                   // fp16 d
      if (has_min(f)) std::memcpy(rec + cpu_mins_at(f) + width * lane, block + 2, 2);  // fp16 m
      uint32_t fifth = 0;                                                              // Q5_0's / Q5_1's qh
      if (has_fifth_bits(f)) std::memcpy(&fifth, block + quants_at(f) - 4, 4);
      const std::byte* qs = block + quants_at(f);
      for (int c = 0; c < kQuantBlockValues; ++c) {
        q[c] = f == MatrixFormat::q8_0 ? static_cast<int8_t>(qs[c]) + 128 : nibble(qs, c) | (((fifth >> c) & 1) << 4);
      }
    }
    // The low bits of each quant into the first vectors, the higher bits (the 5-bit formats' fifth;
    // Q6_K's fifth, then sixth; Q3_K's third) into the planes: bit j of byte 4·lane + i, column 4j + i.
    const int low = cpu_low_bits(f);
    for (int64_t v = 0; v < cpu_quant_bytes(f) / 64; ++v) std::memset(rec + 64 * v + 4 * lane, 0, 4);
    for (int c = 0; c < kQuantBlockValues; ++c) {
      const auto bits = static_cast<uint8_t>((q[c] & ((1 << low) - 1)) << cpu_quant_shift(f, c));
      rec[cpu_quant_byte(f, lane, c)] |= std::byte(bits);
    }
    for (int plane = 0; plane < cpu_high_bit_planes(f); ++plane) {
      for (int i = 0; i < 4; ++i) {
        uint8_t bits = 0;
        for (int j = 0; j < 8; ++j) bits |= static_cast<uint8_t>(((q[4 * j + i] >> (low + plane)) & 1) << j);
        rec[cpu_quant_bytes(f) + 64 * plane + 4 * lane + i] = std::byte(bits);
      }
    }
  }
}

float cpu_matrix_value(MatrixFormat f, const std::byte* matrix, int64_t k, int64_t r, int64_t c) {
  const int64_t lane = r % kCpuRowGroup, col = c % kQuantBlockValues, b = c / kQuantBlockValues;
  const std::byte* group = cpu_group(f, const_cast<std::byte*>(matrix), k, r);
  const std::byte* rec = group + cpu_record_at(f, b);
  const int low = cpu_low_bits(f);
  int q = (static_cast<uint8_t>(rec[cpu_quant_byte(f, lane, col)]) >> cpu_quant_shift(f, col)) & ((1 << low) - 1);
  for (int plane = 0; plane < cpu_high_bit_planes(f); ++plane) {
    q |= ((static_cast<uint8_t>(rec[cpu_quant_bytes(f) + 64 * plane + 4 * lane + col % 4]) >> (col / 4)) & 1) << (low + plane);
  }
  if (is_k_quant(f)) {  // (d · sc) · (u - offset) [+ (-dmin) · m], as ggml's dequantize_row_*: (d · sc) first
    const std::byte* header = group + cpu_header_at(f, b);
    const int64_t h = has_half_block_scales(f) ? col / 16 : 0;
    const float scale = f16_value(header + 2 * lane) * static_cast<float>(static_cast<int8_t>(rec[cpu_scales_at(f) + kCpuRowGroup * h + lane]));
    const int offset = f == MatrixFormat::q6_k ? 32 : f == MatrixFormat::q3_k ? 4 : 0;
    float v = scale * static_cast<float>(q - offset);
    if (cpu_has_min(f)) {
      v += f16_value(header + 2 * kCpuRowGroup + 2 * lane) * static_cast<float>(static_cast<int8_t>(rec[cpu_mins_at(f) + kCpuRowGroup * h + lane]));
    }
    return v;
  }
  const float scale = f16_value(rec + cpu_scales_at(f) + 2 * lane);
  switch (f) {
    case MatrixFormat::q8_0: return static_cast<float>(q - 128) * scale;
    case MatrixFormat::q4_0: return static_cast<float>(q - 8) * scale;
    case MatrixFormat::q5_0: return static_cast<float>(q - 16) * scale;
    default:  // Q4_1, Q5_1: q · d + m
      return static_cast<float>(q) * scale + f16_value(rec + cpu_mins_at(f) + 2 * lane);
  }
}

void quantize_q8_0(std::span<const float> x, std::span<std::byte> out) {
  if (x.size() % kQuantBlockValues != 0 || out.size() != x.size() / kQuantBlockValues * 34) {
    fail("internal: quantize_q8_0 of ", x.size(), " values into ", out.size(), " bytes");
  }
  for (size_t b = 0; b < x.size() / kQuantBlockValues; ++b) {
    const float* v = x.data() + b * kQuantBlockValues;
    float amax = 0.0f;
    for (int j = 0; j < kQuantBlockValues; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = f32_to_f16(d);
    std::byte* block = out.data() + b * 34;
    std::memcpy(block, &h, 2);
    for (int j = 0; j < kQuantBlockValues; ++j) {
      block[2 + j] = std::byte(static_cast<uint8_t>(static_cast<int8_t>(std::round(v[j] * id))));
    }
  }
}

// FP8 keeps its rows as they are (fp8_row_bytes apart), its scales in 128 × 128 blocks.
void repack_fp8_row(std::span<const uint8_t> codes, int64_t n, int64_t k, int64_t r, std::byte* matrix) {
  if (k % kQuantBlockValues != 0 || static_cast<int64_t>(codes.size()) != k || r < 0 || r >= n) {
    fail("internal: repack_fp8_row: ", codes.size(), " codes for row ", r, " of [", n, ", ", k, "]");
  }
  std::memcpy(matrix + r * fp8_row_bytes(k), codes.data(), codes.size());
}

namespace {
int64_t fp8_scale_at(int64_t n, int64_t k, int64_t r, int64_t j) {
  return quant_scales_offset(MatrixFormat::fp8, n, k) + ((r / kFp8BlockRows) * fp8_scale_cols(k) + j) * 4;
}
}  // namespace

void set_fp8_scale(std::byte* matrix, int64_t n, int64_t k, int64_t r, int64_t j, float scale) {
  if (r < 0 || r >= n || j < 0 || j >= fp8_scale_cols(k)) fail("internal: set_fp8_scale of (", r, ", ", j, ") of [", n, ", ", k, "]");
  std::memcpy(matrix + fp8_scale_at(n, k, r, j), &scale, 4);
}

float fp8_tensor_scale(float amax) {
  constexpr float kLargest = 448.0f;
  return amax > 0.0f ? amax / kLargest : 1.0f;
}

void quantize_fp8(std::span<const float> values, float scale, std::span<uint8_t> codes) {
  if (codes.size() != values.size() || !(scale > 0.0f) || !std::isfinite(scale)) {
    fail("internal: quantize_fp8 of ", values.size(), " values into ", codes.size(), " codes with scale ", scale);
  }
  for (size_t i = 0; i < values.size(); ++i) codes[i] = f32_to_f8e4m3(values[i] / scale);
}

float matrix_value(MatrixFormat f, const std::byte* matrix, int64_t n, int64_t k, int64_t r, int64_t c) {
  if (f == MatrixFormat::fp8) {  // code · scale
    const auto code = static_cast<uint8_t>(matrix[r * fp8_row_bytes(k) + c]);
    float scale;
    std::memcpy(&scale, matrix + fp8_scale_at(n, k, r, c / kFp8BlockCols), 4);
    return f8e4m3_to_f32(code) * scale;
  }
  if (f == MatrixFormat::q6_k) {  // d·sc · (u - 32), as ggml's dequantize_row_q6_K: (d · sc) first
    const int64_t supers = k / kQ4kSuperValues;
    const Q6kBits at = q6k_bits(n, k, r, c / kQuantBlockValues, c % kQuantBlockValues);
    const int u = static_cast<int>(bits_at(matrix, at.lo, 0x0F) | (bits_at(matrix, at.hi, 3) << 4));
    const int64_t sc_at =
        quant_after_high_offset(MatrixFormat::q6_k, n, k) + (r * supers + c / 256) * kQ6kScaleBytes + (c % 256) / 16;
    const auto sc = static_cast<int8_t>(matrix[sc_at]);
    float d = 0.0f;
    f16_elements_to_f32(matrix + q6k_d_offset(n, k) + (r * supers + c / 256) * 2, std::span<float>(&d, 1));
    return d * static_cast<float>(sc) * static_cast<float>(u - 32);
  }
  if (has_two_bit_quants(f)) {  // as ggml's dequantize_row_q2_K / _q3_K: the scale d·sc first
    const int64_t b = c / kQuantBlockValues, col = c % kQuantBlockValues;
    const int64_t at = r * (k / kQuantBlockValues / 8) + c / kQ4kSuperValues;  // the super-block's index
    const int64_t sub = (c % kQ4kSuperValues) / 16;                             // its sub-block of 16 values
    const auto u = static_cast<int>(bits_at(matrix, two_bit_place(f, n, k, r, b, col), 3));
    const std::byte* scales = matrix + quant_after_high_offset(f, n, k);
    if (f == MatrixFormat::q2_k) {
      const auto sc = static_cast<uint8_t>(scales[at * kQ2kScaleBytes + sub]);
      const std::byte* dm = matrix + q2k_d_offset(n, k) + at * 4;
      const float dl = f16_value(dm) * static_cast<float>(sc & 0x0F), ml = f16_value(dm + 2) * static_cast<float>(sc >> 4);
      return dl * static_cast<float>(u) - ml;
    }
    std::byte packed[kQ3kScaleLowBytes + kQ3kScaleHighBytes];  // ggml's 12 bytes
    std::memcpy(packed, scales + at * kQ3kScaleLowBytes, kQ3kScaleLowBytes);
    std::memcpy(packed + kQ3kScaleLowBytes, matrix + q3k_scale_high_offset(n, k) + at * kQ3kScaleHighBytes,
                kQ3kScaleHighBytes);
    const float dl = f16_value(matrix + q3k_d_offset(n, k) + at * 2) * static_cast<float>(q3_k_scale(packed, sub) - 32);
    const auto third = static_cast<int>(bits_at(matrix, q3k_third_bit(n, k, r, b, col), 1));
    return dl * static_cast<float>(u + 4 * third - 4);
  }
  const int64_t b = c / kQuantBlockValues, q = (c % kQuantBlockValues) / 8, i = c % 8;
  const BlockPlace p = place(f, n, k, r, b, q);
  const int fifth = has_fifth_bits(f) ? fifth_bit(f, matrix, n, k, r, b, q, i) << 4 : 0;
  if (has_super_headers(f)) {  // d·sc · u - dmin·m, as ggml's dequantize_row_q4_K / _q5_K
    const SubBlockScale s = q4_k_sub_block(matrix + p.scale, static_cast<size_t>(b % 8));
    uint32_t word;
    std::memcpy(&word, matrix + p.lane_bytes + (b % 4) * 4, 4);
    return s.scale * static_cast<float>(((word >> q4_shift(i)) & 0x0F) | fifth) - s.min;
  }
  float scale = 0.0f;
  f16_elements_to_f32(matrix + p.scale, std::span<float>(&scale, 1));
  const int64_t in_group = b % quant_group_blocks(f);
  if (f == MatrixFormat::q8_0) {
    return static_cast<float>(static_cast<int8_t>(matrix[p.lane_bytes + in_group * 8 + i])) * scale;
  }
  uint32_t word;
  std::memcpy(&word, matrix + p.lane_bytes + in_group * 4, 4);
  const int u = static_cast<int>((word >> q4_shift(i)) & 0x0F) | fifth;
  if (has_min(f)) return static_cast<float>(u) * scale + f16_value(matrix + p.scale + 2);  // u · d + m
  return static_cast<float>(u - (f == MatrixFormat::q5_0 ? 16 : 8)) * scale;
}

}  // namespace kiln
