#include "runtime/cuda/dequantize_matrix.hpp"

#include "runtime/core/error.hpp"
#include "templates/linear_quant.cuh"

namespace kiln::cuda {

void dequantize_matrix(GpuMatrix matrix, int n, int k, __nv_bfloat16* out, cudaStream_t stream) {
  if (n <= 0 || k <= 0 || k % kQuantBlockValues != 0 || out == nullptr) {
    fail("internal: dequantize_matrix of [", n, ", ", k, "] (k must be whole blocks of ", kQuantBlockValues,
         ", out set)");
  }
  if (matrix.split > 0) {  // two parts (GpuMatrix::split): each its rows
    dequantize_matrix(GpuMatrix{matrix.data, matrix.format}, matrix.split, k, out, stream);
    dequantize_matrix(GpuMatrix{matrix.tail, matrix.tail_format}, n - matrix.split, k,
                      out + static_cast<long long>(matrix.split) * k, stream);
    return;
  }
  const auto* data = static_cast<const unsigned char*>(matrix.data);
  const long long chunks = static_cast<long long>(n) * quant_row_groups(matrix.format, k) * 4;
  const unsigned blocks = static_cast<unsigned>((chunks + 255) / 256);
  if (is_k_quant(matrix.format) && k % kQ4kSuperValues != 0) {
    fail("internal: dequantize_matrix of a K-quant matrix (format ", static_cast<int>(matrix.format), ") of rows of ", k,
         " values");
  }
  const bool known = kiln::detail::with_block_format<0>(matrix.format, [&](auto f) {
    kiln::detail::dequantize_matrix_kernel<decltype(f)::value><<<blocks, 256, 0, stream>>>(data, out, n, k);
  });
  if (!known) fail("internal: dequantize_matrix of a ", static_cast<int>(matrix.format), " matrix on the GPU");
}

}  // namespace kiln::cuda
