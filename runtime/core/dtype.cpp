#include "runtime/core/dtype.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kiln {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::I16: return "I16";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
    case DType::F8_E4M3: return "F8_E4M3";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64: return 8;
    case DType::F32:
    case DType::I32: return 4;
    case DType::F16:
    case DType::BF16:
    case DType::I16: return 2;
    case DType::I8:
    case DType::U8:
    case DType::BOOL:
    case DType::F8_E4M3: return 1;
  }
  return 0;
}

float f8e4m3_to_f32(uint8_t v) {
  const bool negative = v & 0x80u;
  const int exponent = (v >> 3) & 0xf, mantissa = v & 0x7;
  float value;
  if (exponent == 0xf && mantissa == 0x7) {
    value = NAN;
  } else if (exponent == 0) {
    value = std::ldexp(static_cast<float>(mantissa), -9);  // zero or subnormal: m × 2^-6 / 8
  } else {
    value = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);  // 1.m × 2^(e - 7)
  }
  return negative ? -value : value;
}

uint8_t f32_to_f8e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;  // the largest finite value
  // The nearest code, ties to the even one (--quantize fp8 converts billions: no search). Below
  // 2^-6 the codes are the multiples of 2^-9 (subnormals, then code 8 = 2^-6): a · 2^9 rounded.
  if (a < 0x1p-6f) return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  // Else the float's exponent and top 3 mantissa bits, rounded to nearest even on the 20 below;
  // a carry into the exponent is the next code. The bias moves from 127 to 7: 120 << 3 codes.
  uint32_t bits;
  std::memcpy(&bits, &a, sizeof bits);
  const uint32_t rounded = (bits + 0x7FFFFu + ((bits >> 20) & 1u)) >> 20;
  return sign | static_cast<uint8_t>(std::min<uint32_t>(rounded - (120u << 3), 0x7e));
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  float value;
  if (exponent == 0) {
    value = std::ldexp(static_cast<float>(mantissa), -24);  // zero or subnormal
  } else if (exponent == 31) {
    value = mantissa == 0 ? INFINITY : NAN;
  } else {
    value = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  return sign ? -value : value;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in half: round to nearest even at 2^-24
    const float a = std::fabs(f);
    const float scaled = std::nearbyint(a * 16777216.0f);  // a / 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(scaled));
  }
  uint32_t rounded = abs + 0x0fffu + ((abs >> 13) & 1u);  // round mantissa to 10 bits, ties to even
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

}  // namespace kiln
