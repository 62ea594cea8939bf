// GGUF rows in the GPU's quantized layout (templates/weight_matrix.hpp): the loader repacks each
// row of a Q8_0 or Q4_0 tensor it keeps quantized; the values, scales and byte count stay ggml's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "runtime/weights/ggml_type.hpp"
#include "templates/weight_matrix.hpp"

namespace kiln {

// The GPU format that keeps a GGUF type as stored, if there is one.
std::optional<MatrixFormat> matrix_format_of(GgmlType type);
const char* matrix_format_name(MatrixFormat format);

// Writes one GGUF row of k values (whole ggml blocks of the format's type) as row r of the [n, k]
// matrix at `matrix` (matrix_bytes(format, n, k) bytes, zeroed beforehand: padding stays zero).
void repack_row(MatrixFormat format, std::span<const std::byte> ggml_row, int64_t n, int64_t k, int64_t r,
                std::byte* matrix);

// Value (r, c) of a repacked matrix as the GEMV computes with it: quant · scale (tests).
float matrix_value(MatrixFormat format, const std::byte* matrix, int64_t n, int64_t k, int64_t r, int64_t c);

}  // namespace kiln
