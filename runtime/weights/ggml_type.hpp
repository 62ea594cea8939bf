// ggml tensor types (the element/block formats of GGUF tensors) and their block geometry.
// Every type id llama.cpp defines is known here so tensor sizes can be validated; which of them
// can be dequantized is dequant.hpp's business.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

// Ids as in ggml.h. Gaps (4, 5, 31-33, 36-38) are ids ggml has removed; files using them are rejected.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41,
};

// The type with this id, or nullopt when ggml defines none (unknown or removed).
std::optional<GgmlType> ggml_type_from_id(uint32_t id);
std::string_view ggml_type_name(GgmlType type);

size_t ggml_block_size(GgmlType type);   // elements per block
size_t ggml_block_bytes(GgmlType type);  // bytes per block
// Bytes of `numel` elements of `type`; throws if numel is negative, not a multiple of the block
// size, or the byte count overflows.
size_t ggml_tensor_bytes(GgmlType type, int64_t numel);

}  // namespace kiln
