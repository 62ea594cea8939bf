// Random [n, k] blocks of a GGUF block type in the GPU's layout, and ggml's values of them: the
// quantized GEMV tests' matrices (test_linear.cu, test_linear_act.cu).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/weights/dequant.hpp"
#include "runtime/weights/quant_repack.hpp"
#include "templates/weight_matrix.hpp"
#include "tests/weights/test_support.hpp"

namespace kiln::kernel_test {

struct QuantMatrix {
  MatrixFormat format;
  std::vector<std::byte> matrix;  // the GPU's layout (repack_row)
  std::vector<float> values;      // ggml's dequantized values
};

inline QuantMatrix random_quant_matrix(GgmlType type, int n, int k, uint32_t seed) {
  QuantMatrix m{*matrix_format_of(type), {}, std::vector<float>(static_cast<size_t>(n) * k)};
  const std::vector<std::byte> blocks = test::random_gguf_blocks(type, n, k, seed);
  dequantize(type, blocks, m.values);
  m.matrix.assign(static_cast<size_t>(matrix_bytes(m.format, n, k)), std::byte{0});
  const size_t row_bytes = ggml_tensor_bytes(type, k);
  for (int r = 0; r < n; ++r) {
    repack_row(m.format, std::span<const std::byte>(blocks).subspan(r * row_bytes, row_bytes), n, k, r, m.matrix.data());
  }
  return m;
}

}  // namespace kiln::kernel_test
