// Element-wise conversion of raw float data: little-endian F16 / BF16 elements to fp32, and fp32
// to bf16 bits (round to nearest even). Source bytes need not be aligned to the element size
// (tensors inside a mapping often are not). Shared by the safetensors converters
// (safetensors.hpp), the GGUF dequantizer and the weight loader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kiln {

// dst.size() elements from `src`, which holds at least 2 * dst.size() bytes.
void f16_elements_to_f32(const std::byte* src, std::span<float> dst);
void bf16_elements_to_f32(const std::byte* src, std::span<float> dst);

// dst.size() must equal src.size().
void f32_elements_to_bf16(std::span<const float> src, std::span<uint16_t> dst);

}  // namespace kiln
