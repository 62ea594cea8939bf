// Float element conversion: the raw element loops (float_convert.hpp) and, built on them,
// convert_to_f32 / convert_to_bf16 for float tensors of any stored precision (safetensors.hpp).
#include "runtime/weights/float_convert.hpp"

#include <array>
#include <cstring>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/weights/safetensors.hpp"

namespace kiln {

// Loads go through memcpy: a tensor inside a mapping need not be aligned to its element size.
void f16_elements_to_f32(const std::byte* src, std::span<float> dst) {
  for (size_t i = 0; i < dst.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = f16_to_f32(h);
  }
}

void bf16_elements_to_f32(const std::byte* src, std::span<float> dst) {
  for (size_t i = 0; i < dst.size(); ++i) {
    uint16_t b;
    std::memcpy(&b, src + 2 * i, 2);
    dst[i] = bf16_to_f32(b);
  }
}

void f32_elements_to_bf16(std::span<const float> src, std::span<uint16_t> dst) {
  if (src.size() != dst.size()) fail("f32 -> bf16: ", src.size(), " inputs for ", dst.size(), " outputs");
  for (size_t i = 0; i < src.size(); ++i) dst[i] = f32_to_bf16(src[i]);
}

namespace {

void check_sizes(const TensorView& t, size_t out_size) {
  const int64_t n = t.numel();
  if (static_cast<int64_t>(out_size) != n) {
    fail("tensor \"", t.name, "\": output has ", out_size, " elements, the tensor has ", n);
  }
  if (t.bytes.size() != static_cast<size_t>(n) * dtype_size(t.dtype)) {
    fail("tensor \"", t.name, "\": ", t.bytes.size(), " bytes do not hold ", n, " ", dtype_name(t.dtype), " elements");
  }
}

}  // namespace

void convert_to_f32(const TensorView& t, std::span<float> out) {
  check_sizes(t, out.size());
  const std::byte* p = t.bytes.data();
  switch (t.dtype) {
    case DType::F32:
      if (!out.empty()) std::memcpy(out.data(), p, out.size() * 4);
      return;
    case DType::F16: return f16_elements_to_f32(p, out);
    case DType::BF16: return bf16_elements_to_f32(p, out);
    case DType::F8_E4M3: {  // the stored values; an FP8 checkpoint's block scales are applied by its reader
      // All 256 codes decoded once: an FP8 checkpoint has billions of elements to load.
      static const std::array<float, 256> kE4M3 = [] {
        std::array<float, 256> table{};
        for (int code = 0; code < 256; ++code) table[code] = f8e4m3_to_f32(static_cast<uint8_t>(code));
        return table;
      }();
      for (size_t i = 0; i < out.size(); ++i) out[i] = kE4M3[static_cast<uint8_t>(p[i])];
      return;
    }
    case DType::F64:
      for (size_t i = 0; i < out.size(); ++i) {
        double v;
        std::memcpy(&v, p + 8 * i, 8);
        out[i] = static_cast<float>(v);
      }
      return;
    default:
      fail("tensor \"", t.name, "\": dtype ", dtype_name(t.dtype), " is not a float type (expected F32, F16, BF16, F8_E4M3 or F64)");
  }
}

void convert_to_bf16(const TensorView& t, std::span<uint16_t> out) {
  if (t.dtype == DType::BF16) {  // already bf16: an exact copy
    check_sizes(t, out.size());
    std::memcpy(out.data(), t.bytes.data(), t.bytes.size());
    return;
  }
  std::vector<float> f32(out.size());
  convert_to_f32(t, f32);
  f32_elements_to_bf16(f32, out);
}

void convert_rows_to_f32(const TensorView& t, int64_t first_row, std::span<float> out) {
  check_sizes(t, static_cast<size_t>(t.numel()));
  const int64_t row_length = t.shape.empty() ? 1 : t.shape.back();
  const int64_t rows = row_length == 0 ? 0 : t.numel() / row_length;
  const int64_t count = row_length == 0 ? 0 : static_cast<int64_t>(out.size()) / row_length;
  if (row_length == 0 || static_cast<int64_t>(out.size()) % row_length != 0 || first_row < 0 ||
      first_row > rows - count) {
    fail("tensor \"", t.name, "\": cannot read ", out.size(), " elements from row ", first_row, " (", rows,
         " rows of ", row_length, " elements)");
  }
  TensorView slice = t;
  slice.shape = {count, row_length};
  const size_t element = dtype_size(t.dtype);
  slice.bytes = t.bytes.subspan(static_cast<size_t>(first_row * row_length) * element, out.size() * element);
  convert_to_f32(slice, out);
}

}  // namespace kiln
