// convert_to_f32 / convert_to_bf16: float tensors of any stored precision to what kernels read.
#include <cstring>

#include "runtime/core/error.hpp"
#include "runtime/weights/safetensors.hpp"

namespace kiln {
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

// Calls sink(i, element i as fp32) for every element. Loads go through memcpy: a tensor inside a
// mapping need not be aligned to its element size.
template <typename Sink>
void for_each_as_f32(const TensorView& t, size_t out_size, Sink&& sink) {
  check_sizes(t, out_size);
  const int64_t n = t.numel();
  const std::byte* p = t.bytes.data();
  switch (t.dtype) {
    case DType::F32:
      for (int64_t i = 0; i < n; ++i) {
        float v;
        std::memcpy(&v, p + 4 * i, 4);
        sink(i, v);
      }
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        sink(i, f16_to_f32(h));
      }
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        sink(i, bf16_to_f32(b));
      }
      return;
    case DType::F64:
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, p + 8 * i, 8);
        sink(i, static_cast<float>(v));
      }
      return;
    default:
      fail("tensor \"", t.name, "\": dtype ", dtype_name(t.dtype), " is not a float type (expected F32, F16, BF16 or F64)");
  }
}

}  // namespace

void convert_to_f32(const TensorView& t, std::span<float> out) {
  for_each_as_f32(t, out.size(), [&](int64_t i, float v) { out[i] = v; });
}

void convert_to_bf16(const TensorView& t, std::span<uint16_t> out) {
  if (t.dtype == DType::BF16) {  // already bf16: an exact copy
    check_sizes(t, out.size());
    std::memcpy(out.data(), t.bytes.data(), t.bytes.size());
    return;
  }
  for_each_as_f32(t, out.size(), [&](int64_t i, float v) { out[i] = f32_to_bf16(v); });
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
