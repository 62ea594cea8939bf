// Dequantization of GGUF tensor data to fp32, bit-exact with ggml's reference dequantize_row_*
// (same operation order; this file is compiled without floating-point contraction).
#pragma once

#include <cstddef>
#include <span>

#include "runtime/weights/ggml_type.hpp"  // ggml_block_size, ggml_block_bytes, ggml_tensor_bytes

namespace kiln {

// True for the types dequantize() implements: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K (the types llama-quantize's Q*_0/_1 and Q*_K recipes write).
bool can_dequantize(GgmlType type);
// Those types' names, comma separated, for error messages.
const char* dequantizable_type_names();

// Dequantizes dst.size() elements from src, which must hold exactly that many elements of `type`
// (whole blocks). Throws naming the type for unsupported types or mismatched sizes.
void dequantize(GgmlType type, std::span<const std::byte> src, std::span<float> dst);

// Sub-block j (0..7, 32 values) of a Q4_K block (144 bytes): value = scale · nibble - min, with
// scale = d · its 6-bit scale and min = dmin · its 6-bit min in fp32, as dequantize computes them.
// Its nibbles are the low (j even) or high (j odd) halves of bytes 16 + 32·(j / 2) onwards.
struct SubBlockScale {
  float scale, min;
};
SubBlockScale q4_k_sub_block(const std::byte* block, size_t j);
// ... and its 6-bit scale and min themselves (0..63), from the block's 12 packed bytes at 4.
struct SubBlockBits {
  int scale, min;
};
SubBlockBits q4_k_sub_block_bits(const std::byte* block, size_t j);

// Q3_K's 6-bit scale j (0..15, 16 values each; value = d · (scale - 32) · (u - 4)) from the block's
// 12 packed bytes: its low 4 bits are the low (j < 8) or high (j >= 8) nibble of byte j % 8, its
// top 2 bits bits 2·(j / 4) .. +1 of byte 8 + j % 4.
int q3_k_scale(const std::byte* packed, size_t j);

}  // namespace kiln
