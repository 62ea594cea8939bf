#include "runtime/weights/ggml_type.hpp"

#include <array>

#include "runtime/core/error.hpp"

namespace kiln {
namespace {

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;
  uint32_t block_size;
  uint32_t block_bytes;
};

// Block geometry from ggml-common.h (struct sizes) and ggml.c's type traits. Q8_1 is 36 bytes
// (ggml_half d, s + 32 int8) as in ggml; older gguf-py tables list 40 from a pre-2024 layout.
constexpr std::array kTypes = {
    GgmlTypeInfo{GgmlType::F32, "F32", 1, 4},
    GgmlTypeInfo{GgmlType::F16, "F16", 1, 2},
    GgmlTypeInfo{GgmlType::Q4_0, "Q4_0", 32, 18},
    GgmlTypeInfo{GgmlType::Q4_1, "Q4_1", 32, 20},
    GgmlTypeInfo{GgmlType::Q5_0, "Q5_0", 32, 22},
    GgmlTypeInfo{GgmlType::Q5_1, "Q5_1", 32, 24},
    GgmlTypeInfo{GgmlType::Q8_0, "Q8_0", 32, 34},
    GgmlTypeInfo{GgmlType::Q8_1, "Q8_1", 32, 36},
    GgmlTypeInfo{GgmlType::Q2_K, "Q2_K", 256, 84},
    GgmlTypeInfo{GgmlType::Q3_K, "Q3_K", 256, 110},
    GgmlTypeInfo{GgmlType::Q4_K, "Q4_K", 256, 144},
    GgmlTypeInfo{GgmlType::Q5_K, "Q5_K", 256, 176},
    GgmlTypeInfo{GgmlType::Q6_K, "Q6_K", 256, 210},
    GgmlTypeInfo{GgmlType::Q8_K, "Q8_K", 256, 292},
    GgmlTypeInfo{GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66},
    GgmlTypeInfo{GgmlType::IQ2_XS, "IQ2_XS", 256, 74},
    GgmlTypeInfo{GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98},
    GgmlTypeInfo{GgmlType::IQ1_S, "IQ1_S", 256, 50},
    GgmlTypeInfo{GgmlType::IQ4_NL, "IQ4_NL", 32, 18},
    GgmlTypeInfo{GgmlType::IQ3_S, "IQ3_S", 256, 110},
    GgmlTypeInfo{GgmlType::IQ2_S, "IQ2_S", 256, 82},
    GgmlTypeInfo{GgmlType::IQ4_XS, "IQ4_XS", 256, 136},
    GgmlTypeInfo{GgmlType::I8, "I8", 1, 1},
    GgmlTypeInfo{GgmlType::I16, "I16", 1, 2},
    GgmlTypeInfo{GgmlType::I32, "I32", 1, 4},
    GgmlTypeInfo{GgmlType::I64, "I64", 1, 8},
    GgmlTypeInfo{GgmlType::F64, "F64", 1, 8},
    GgmlTypeInfo{GgmlType::IQ1_M, "IQ1_M", 256, 56},
    GgmlTypeInfo{GgmlType::BF16, "BF16", 1, 2},
    GgmlTypeInfo{GgmlType::TQ1_0, "TQ1_0", 256, 54},
    GgmlTypeInfo{GgmlType::TQ2_0, "TQ2_0", 256, 66},
    GgmlTypeInfo{GgmlType::MXFP4, "MXFP4", 32, 17},
    GgmlTypeInfo{GgmlType::NVFP4, "NVFP4", 64, 36},
    GgmlTypeInfo{GgmlType::Q1_0, "Q1_0", 128, 18},
};

const GgmlTypeInfo* find_info(uint32_t id) {
  for (const GgmlTypeInfo& info : kTypes) {
    if (static_cast<uint32_t>(info.type) == id) return &info;
  }
  return nullptr;
}

const GgmlTypeInfo& info_of(GgmlType type) {
  const GgmlTypeInfo* info = find_info(static_cast<uint32_t>(type));
  if (info == nullptr) fail("ggml type id ", static_cast<uint32_t>(type), " is not a type ggml defines");
  return *info;
}

}  // namespace

std::optional<GgmlType> ggml_type_from_id(uint32_t id) {
  const GgmlTypeInfo* info = find_info(id);
  if (info == nullptr) return std::nullopt;
  return info->type;
}

std::string_view ggml_type_name(GgmlType type) {
  const GgmlTypeInfo* info = find_info(static_cast<uint32_t>(type));
  return info != nullptr ? info->name : std::string_view("unknown");
}

size_t ggml_block_size(GgmlType type) { return info_of(type).block_size; }
size_t ggml_block_bytes(GgmlType type) { return info_of(type).block_bytes; }

size_t ggml_tensor_bytes(GgmlType type, int64_t numel) {
  const GgmlTypeInfo& info = info_of(type);
  if (numel < 0) fail("ggml tensor of type ", info.name, ": negative element count ", numel);
  if (numel % info.block_size != 0) {
    fail("ggml tensor of type ", info.name, ": ", numel, " elements is not a multiple of its block size ",
         info.block_size);
  }
  size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(numel) / info.block_size, size_t{info.block_bytes}, &bytes)) {
    fail("ggml tensor of type ", info.name, " with ", numel, " elements: byte size overflows");
  }
  return bytes;
}

}  // namespace kiln
