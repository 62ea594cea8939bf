// GGUF rows in the GPU's and the fast CPU backend's quantized layouts (templates/weight_matrix.hpp):
// the loader repacks each row of a Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K
// tensor it keeps quantized; the values, scales and byte count stay ggml's. Rows of a matrix
// stacked from pieces of three block types or more are requantized to Q8_0 (quantize_q8_0), which
// is closer to them than bf16 and half its bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "runtime/weights/ggml_type.hpp"
#include "templates/weight_matrix.hpp"

namespace kiln {

enum class Device { cpu, gpu };

// The format that keeps a GGUF type as stored, if there is one (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K): the GPU's repacked by repack_row, the fast CPU backend's by
// repack_cpu_row.
std::optional<MatrixFormat> matrix_format_of(GgmlType type);
const char* matrix_format_name(MatrixFormat format);
// ... and the other way: the GGUF type a block format keeps as stored (throws for bf16, f32, FP8).
GgmlType ggml_type_of(MatrixFormat format);

// Writes one GGUF row of k values (whole ggml blocks of the format's type) as row r of the [n, k]
// matrix at `matrix` (matrix_bytes(format, n, k) bytes, zeroed beforehand: padding stays zero).
void repack_row(MatrixFormat format, std::span<const std::byte> ggml_row, int64_t n, int64_t k, int64_t r,
                std::byte* matrix);

// Writes one GGUF row of k values (whole ggml blocks of the format's type) as row r of an [n, k]
// matrix at `matrix` in the fast CPU backend's layout (templates/weight_matrix.hpp,
// cpu_matrix_bytes(format, n, k) bytes). Only row r's bytes are written, so rows of one group may
// be repacked by several threads at once; padding rows are the caller's (zeroed).
void repack_cpu_row(MatrixFormat format, std::span<const std::byte> ggml_row, int64_t k, int64_t r, std::byte* matrix);

// Value (r, c) of an [n, k] matrix in the CPU layout: quant · scale (+ min), as the kernels compute
// with it (ref::embed's lookups in a table kept in blocks, and tests).
float cpu_matrix_value(MatrixFormat format, const std::byte* matrix, int64_t k, int64_t r, int64_t c);

// ggml's quantize_row_q8_0_ref: per 32 values d = max|x| / 127, stored as fp16, and q = round(x / d)
// (with d's fp32 value, as ggml does). x.size() a multiple of 32; out: x.size() / 32 · 34 bytes.
void quantize_q8_0(std::span<const float> x, std::span<std::byte> out);

// FP8 (E4M3) matrices in the GPU's layout: row r's k codes (an FP8 checkpoint's, or quantize_fp8's)
// into the quants area, and the scale of row r's block of 128 rows over columns 128·j..128·j + 127.
void repack_fp8_row(std::span<const uint8_t> codes, int64_t n, int64_t k, int64_t r, std::byte* matrix);
void set_fp8_scale(std::byte* matrix, int64_t n, int64_t k, int64_t r, int64_t j, float scale);

// FP8 quantized at load (--quantize fp8, and FP8 checkpoints whose blocks the GPU's 128 × 128 cannot
// take as stored): one scale for the whole matrix, max |x| / 448 (E4M3's largest, so that the
// largest value maps to 448; 1 for a matrix of zeros), as vLLM's online FP8 does, which lets the
// prefill's GEMM run per token (templates/fp8_rows.hpp). Each code is x / scale rounded to the
// nearest E4M3 (values.size() == codes.size()).
float fp8_tensor_scale(float amax);
void quantize_fp8(std::span<const float> values, float scale, std::span<uint8_t> codes);

// Value (r, c) of a repacked matrix as the GEMV computes with it: quant · scale (tests).
float matrix_value(MatrixFormat format, const std::byte* matrix, int64_t n, int64_t k, int64_t r, int64_t c);

}  // namespace kiln
