// Block layouts follow ggml-common.h; the arithmetic follows ggml-quants.c's dequantize_row_*
// so results match ggml (and gguf-py) bit for bit:
//   Q8_0  (32 el, 34 B): f16 d, int8 qs[32]                 x = qs * d
//   Q4_0  (32 el, 18 B): f16 d, u8 qs[16]                   x = (q - 8) * d
//   Q4_1  (32 el, 20 B): f16 d, f16 m, u8 qs[16]            x = q * d + m
//     nibbles: element j (j < 16) is qs[j] & 0xF, element j + 16 is qs[j] >> 4
//   Q4_K (256 el, 144 B): f16 d, f16 dmin, u8 scales[12], u8 qs[128]
//     8 sub-blocks of 32 with 6-bit scale sc and min m (see scale_min_k4);
//     x = (d * sc) * q - (dmin * m); each 32 bytes of qs hold two sub-blocks (low then high nibbles)
//   Q6_K (256 el, 210 B): u8 ql[128], u8 qh[64], int8 scales[16], f16 d
//     q = (4 low bits from ql | 2 high bits from qh << 4) - 32;  x = (d * scale) * q
//   Q5_0  (32 el, 22 B): f16 d, u8 qh[4], u8 qs[16]         x = (q - 16) * d
//   Q5_1  (32 el, 24 B): f16 d, f16 m, u8 qh[4], u8 qs[16]  x = q * d + m
//     q = nibble as in Q4_0 | bit j (element j) or bit j + 12 (element j + 16, j < 16) of qh << 4
//   Q2_K  (256 el, 84 B): u8 scales[16], u8 qs[64], f16 d, f16 dmin
//     16 sub-blocks of 16, each a byte: low nibble scale, high nibble min;
//     x = (d * sc) * q - (dmin * m), q the 2-bit field of qs at shift 0, 2, 4, 6
//   Q3_K (256 el, 110 B): u8 hmask[32], u8 qs[64], u8 scales[12], f16 d
//     16 6-bit scales (see unpack_scales_q3_k) s; q = 2-bit field of qs - (hmask bit clear ? 4 : 0);
//     x = (d * (s - 32)) * q
//   Q5_K (256 el, 176 B): f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
//     Q4_K's scales and nibbles, plus a fifth bit from qh (bit 2g for the low, 2g + 1 for the high
//     nibbles of group g)
#include "runtime/weights/dequant.hpp"

#include <cstdint>
#include <cstring>

#include "runtime/core/dtype.hpp"
#include "runtime/core/error.hpp"
#include "runtime/weights/float_convert.hpp"

namespace kiln {
namespace {

constexpr size_t kQK = 32;   // elements per Q4_0 / Q4_1 / Q8_0 block
constexpr size_t kQKK = 256; // elements per K-quant super-block

float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

void dequantize_f32(const uint8_t* src, size_t n, float* dst) {
  if (n > 0) std::memcpy(dst, src, n * 4);
}

void dequantize_q8_0(const uint8_t* block, float* y) {
  const float d = load_f16(block);
  const int8_t* qs = reinterpret_cast<const int8_t*>(block + 2);
  for (size_t j = 0; j < kQK; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

void dequantize_q4_0(const uint8_t* block, float* y) {
  const float d = load_f16(block);
  const uint8_t* qs = block + 2;
  for (size_t j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + kQK / 2] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void dequantize_q4_1(const uint8_t* block, float* y) {
  const float d = load_f16(block);
  const float m = load_f16(block + 2);
  const uint8_t* qs = block + 4;
  for (size_t j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + kQK / 2] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// The 6-bit scale and min of Q4_K/Q5_K sub-block j (0..7) from the 12 packed bytes:
// bytes 0-3 hold scales 0-3 in their low 6 bits, bytes 4-7 mins 0-3; sub-blocks 4-7 take their
// low 4 bits from bytes 8-11 (scale: low nibble, min: high nibble) and their top 2 bits from the
// spare top bits of bytes 0-3 (scale) and 4-7 (min).
void scale_min_k4(size_t j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q4_K / Q5_K group g (64 elements): the scale and min of its low (sub-block 2g) and high
// (sub-block 2g + 1) halves, from the block's f16 d, dmin at 0 and packed scales at 4.
struct GroupScales {
  float d_lo, m_lo, d_hi, m_hi;
};
GroupScales k4_group_scales(const uint8_t* block, size_t g) {
  const float d = load_f16(block), dmin = load_f16(block + 2);
  uint8_t sc, m;
  scale_min_k4(2 * g, block + 4, &sc, &m);
  const float d_lo = d * sc, m_lo = dmin * m;
  scale_min_k4(2 * g + 1, block + 4, &sc, &m);
  return {d_lo, m_lo, d * sc, dmin * m};
}

void dequantize_q4_k(const uint8_t* block, float* y) {
  const uint8_t* q = block + 16;
  // Four groups of 64 elements; each group's 32 bytes of q give sub-block 2g (low nibbles) and
  // 2g + 1 (high nibbles).
  for (size_t g = 0; g < 4; ++g) {
    const auto [d_lo, m_lo, d_hi, m_hi] = k4_group_scales(block, g);
    for (size_t l = 0; l < 32; ++l) y[l] = d_lo * static_cast<float>(q[l] & 0x0F) - m_lo;
    for (size_t l = 0; l < 32; ++l) y[32 + l] = d_hi * static_cast<float>(q[l] >> 4) - m_hi;
    q += 32;
    y += 64;
  }
}

void dequantize_q6_k(const uint8_t* block, float* y) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(block + 192);
  const float d = load_f16(block + 208);
  // Two halves of 128 elements; each uses 64 bytes of ql, 32 of qh and 8 scales (one per 16).
  for (size_t half = 0; half < 2; ++half) {
    for (size_t l = 0; l < 32; ++l) {
      const size_t is = l / 16;
      const int q1 = static_cast<int>((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = static_cast<int>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = static_cast<int>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = static_cast<int>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// The fifth bit of element j (0..31) of a Q5_0 / Q5_1 block, as 0 or 16: elements 0-15 take bits 0-15
// of qh, elements 16-31 bits 16-31.
uint32_t q5_high_bits(const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  return qh;
}

void dequantize_q5_0(const uint8_t* block, float* y) {
  const float d = load_f16(block);
  const uint32_t qh = q5_high_bits(block + 2);
  const uint8_t* qs = block + 6;
  for (size_t j = 0; j < kQK / 2; ++j) {
    const int x0 = static_cast<int>((qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
    const int x1 = static_cast<int>((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
    y[j] = static_cast<float>(x0) * d;
    y[j + kQK / 2] = static_cast<float>(x1) * d;
  }
}

void dequantize_q5_1(const uint8_t* block, float* y) {
  const float d = load_f16(block);
  const float m = load_f16(block + 2);
  const uint32_t qh = q5_high_bits(block + 4);
  const uint8_t* qs = block + 8;
  for (size_t j = 0; j < kQK / 2; ++j) {
    const int x0 = static_cast<int>((qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10));
    const int x1 = static_cast<int>((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10));
    y[j] = static_cast<float>(x0) * d + m;
    y[j + kQK / 2] = static_cast<float>(x1) * d + m;
  }
}

void dequantize_q2_k(const uint8_t* block, float* y) {
  const uint8_t* scales = block;
  const uint8_t* q = block + 16;
  const float d = load_f16(block + 80);
  const float dmin = load_f16(block + 82);
  // Two halves of 128 elements, each from 32 bytes of q read four times (shift 0, 2, 4, 6); each
  // read gives two sub-blocks of 16 (bytes 0-15, then 16-31).
  size_t is = 0;
  for (size_t half = 0; half < 2; ++half) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (size_t part = 0; part < 2; ++part) {
        const uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 0x0F), ml = dmin * static_cast<float>(sc >> 4);
        for (size_t l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
      }
    }
    q += 32;
  }
}

void dequantize_q3_k(const uint8_t* block, float* y) {
  const uint8_t* hmask = block;
  const uint8_t* q = block + 32;
  const float d = load_f16(block + 108);
  int scales[16];
  for (size_t j = 0; j < 16; ++j) scales[j] = q3_k_scale(reinterpret_cast<const std::byte*>(block + 96), j);
  // As Q2_K's layout, with the third bit of element l of each 32-element read from bit m of
  // hmask[l] (m counting the reads, 0..7).
  size_t is = 0;
  uint8_t m = 1;
  for (size_t half = 0; half < 2; ++half) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (size_t part = 0; part < 2; ++part) {
        const float dl = d * static_cast<float>(scales[is++] - 32);
        for (size_t l = 16 * part; l < 16 * part + 16; ++l) {
          const int x = ((q[l] >> shift) & 3) - ((hmask[l] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(x);
        }
      }
      m = static_cast<uint8_t>(m << 1);
    }
    q += 32;
  }
}

void dequantize_q5_k(const uint8_t* block, float* y) {
  const uint8_t* qh = block + 16;
  const uint8_t* ql = block + 48;
  for (size_t g = 0; g < 4; ++g) {
    const auto [d_lo, m_lo, d_hi, m_hi] = k4_group_scales(block, g);
    const uint8_t bit_lo = static_cast<uint8_t>(1u << (2 * g)), bit_hi = static_cast<uint8_t>(2u << (2 * g));
    for (size_t l = 0; l < 32; ++l) {
      y[l] = d_lo * static_cast<float>((ql[l] & 0x0F) + ((qh[l] & bit_lo) ? 16 : 0)) - m_lo;
    }
    for (size_t l = 0; l < 32; ++l) {
      y[32 + l] = d_hi * static_cast<float>((ql[l] >> 4) + ((qh[l] & bit_hi) ? 16 : 0)) - m_hi;
    }
    ql += 32;
    y += 64;
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_function(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0: return dequantize_q8_0;
    case GgmlType::Q4_0: return dequantize_q4_0;
    case GgmlType::Q4_1: return dequantize_q4_1;
    case GgmlType::Q4_K: return dequantize_q4_k;
    case GgmlType::Q6_K: return dequantize_q6_k;
    case GgmlType::Q5_0: return dequantize_q5_0;
    case GgmlType::Q5_1: return dequantize_q5_1;
    case GgmlType::Q2_K: return dequantize_q2_k;
    case GgmlType::Q3_K: return dequantize_q3_k;
    case GgmlType::Q5_K: return dequantize_q5_k;
    default: return nullptr;
  }
}

}  // namespace

const char* dequantizable_type_names() {
  return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K";
}

bool can_dequantize(GgmlType type) {
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16 || block_function(type) != nullptr;
}

int q3_k_scale(const std::byte* packed, size_t j) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(packed[i]); };
  const uint8_t low = j < 8 ? (byte(j) & 0x0F) : (byte(j - 8) >> 4);
  const uint8_t high = (byte(8 + j % 4) >> (2 * (j / 4))) & 3;
  return low | (high << 4);
}

SubBlockBits q4_k_sub_block_bits(const std::byte* block, size_t j) {
  uint8_t sc, m;
  scale_min_k4(j, reinterpret_cast<const uint8_t*>(block) + 4, &sc, &m);
  return {sc, m};
}

SubBlockScale q4_k_sub_block(const std::byte* block, size_t j) {
  const auto* b = reinterpret_cast<const uint8_t*>(block);
  const GroupScales g = k4_group_scales(b, j / 2);
  return j % 2 == 0 ? SubBlockScale{g.d_lo, g.m_lo} : SubBlockScale{g.d_hi, g.m_hi};
}

void dequantize(GgmlType type, std::span<const std::byte> src, std::span<float> dst) {
  if (!can_dequantize(type)) {
    fail("cannot dequantize ggml type ", ggml_type_name(type),
         " (kiln dequantizes ", dequantizable_type_names(), ")");
  }
  const size_t expected = ggml_tensor_bytes(type, static_cast<int64_t>(dst.size()));
  if (src.size() != expected) {
    fail("dequantize ", ggml_type_name(type), ": ", dst.size(), " elements need ", expected, " bytes, got ", src.size());
  }
  const auto* in = reinterpret_cast<const uint8_t*>(src.data());
  float* out = dst.data();
  switch (type) {
    case GgmlType::F32: return dequantize_f32(in, dst.size(), out);
    case GgmlType::F16: return f16_elements_to_f32(src.data(), dst);
    case GgmlType::BF16: return bf16_elements_to_f32(src.data(), dst);
    default: break;
  }
  const BlockFn fn = block_function(type);
  const size_t block_size = ggml_block_size(type);
  const size_t block_bytes = ggml_block_bytes(type);
  for (size_t b = 0; b < dst.size() / block_size; ++b) fn(in + b * block_bytes, out + b * block_size);
}

}  // namespace kiln
