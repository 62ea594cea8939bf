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
  switch (matrix.format) {
    case MatrixFormat::bf16:
    case MatrixFormat::f32: fail("internal: dequantize_matrix of a ", static_cast<int>(matrix.format), " matrix on the GPU");
    case MatrixFormat::fp8:
      kiln::detail::dequantize_matrix_kernel<MatrixFormat::fp8><<<blocks, 256, 0, stream>>>(data, out, n, k);
      break;
    case MatrixFormat::q8_0:
      kiln::detail::dequantize_matrix_kernel<MatrixFormat::q8_0><<<blocks, 256, 0, stream>>>(data, out, n, k);
      break;
    case MatrixFormat::q4_0:
      kiln::detail::dequantize_matrix_kernel<MatrixFormat::q4_0><<<blocks, 256, 0, stream>>>(data, out, n, k);
      break;
    case MatrixFormat::q4_1:
      kiln::detail::dequantize_matrix_kernel<MatrixFormat::q4_1><<<blocks, 256, 0, stream>>>(data, out, n, k);
      break;
    case MatrixFormat::q5_0:
      kiln::detail::dequantize_matrix_kernel<MatrixFormat::q5_0><<<blocks, 256, 0, stream>>>(data, out, n, k);
      break;
    case MatrixFormat::q4_k:
      if (k % kQ4kSuperValues != 0) fail("internal: dequantize_matrix of a Q4_K matrix of rows of ", k, " values");
      kiln::detail::dequantize_matrix_kernel<MatrixFormat::q4_k><<<blocks, 256, 0, stream>>>(data, out, n, k);
      break;
    case MatrixFormat::q6_k:
      if (k % kQ4kSuperValues != 0) fail("internal: dequantize_matrix of a Q6_K matrix of rows of ", k, " values");
      kiln::detail::dequantize_matrix_kernel<MatrixFormat::q6_k><<<blocks, 256, 0, stream>>>(data, out, n, k);
      break;
  }
}

}  // namespace kiln::cuda
