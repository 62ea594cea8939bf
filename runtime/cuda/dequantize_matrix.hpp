// bf16 rows of a projection kept in a GGUF file's blocks (templates/weight_matrix.hpp): the prefill
// GEMM (cuBLASLt) reads bf16, so a quantized matrix is expanded into scratch before each use.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "templates/weight_matrix.hpp"

namespace kiln::cuda {

// out: [n, k] bf16 (16-byte aligned), each value quant · scale rounded once; a matrix in two parts
// (GpuMatrix::split) gives its first part's rows, then its second's.
void dequantize_matrix(GpuMatrix matrix, int n, int k, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace kiln::cuda
