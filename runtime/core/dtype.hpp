// Element types of weight files and their conversion to fp32 / bf16.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace kiln {

// Element types kiln reads from weight files (safetensors names; GGUF block types live in gguf.hpp).
// F8_E4M3: OCP FP8 E4M3 ("fn": no infinities; S.1111.111 is NaN; largest finite 448), the weights of
// FP8 checkpoints, with their block scales (safetensors_source.cpp).
enum class DType { F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL, F8_E4M3 };

std::string_view dtype_name(DType t);
size_t dtype_size(DType t);

// FP8 E4M3 -> float (exact), and float -> E4M3 rounded to nearest even, saturating at ±448 (FP8
// checkpoints scale each block so that its largest magnitude is 448); NaN stays NaN.
float f8e4m3_to_f32(uint8_t v);
uint8_t f32_to_f8e4m3(float f);

// IEEE binary16 -> float (handles subnormals, inf, NaN).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

inline float bf16_to_f32(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace kiln
