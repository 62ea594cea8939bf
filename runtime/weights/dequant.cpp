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

void dequantize_q4_k(const uint8_t* block, float* y) {
  const float d = load_f16(block);
  const float dmin = load_f16(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* q = block + 16;
  // Four groups of 64 elements; each group's 32 bytes of q give sub-block 2g (low nibbles) and
  // 2g + 1 (high nibbles).
  for (size_t g = 0; g < 4; ++g) {
    uint8_t sc, m;
    scale_min_k4(2 * g, scales, &sc, &m);
    const float d_lo = d * sc, m_lo = dmin * m;
    scale_min_k4(2 * g + 1, scales, &sc, &m);
    const float d_hi = d * sc, m_hi = dmin * m;
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

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_function(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0: return dequantize_q8_0;
    case GgmlType::Q4_0: return dequantize_q4_0;
    case GgmlType::Q4_1: return dequantize_q4_1;
    case GgmlType::Q4_K: return dequantize_q4_k;
    case GgmlType::Q6_K: return dequantize_q6_k;
    default: return nullptr;
  }
}

}  // namespace

bool can_dequantize(GgmlType type) {
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16 || block_function(type) != nullptr;
}

void dequantize(GgmlType type, std::span<const std::byte> src, std::span<float> dst) {
  if (!can_dequantize(type)) {
    fail("cannot dequantize ggml type ", ggml_type_name(type),
         " (kiln dequantizes F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K)");
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
