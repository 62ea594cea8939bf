#include "runtime/cuda/quantize_rows.hpp"

#include <cstdint>

#include "runtime/core/error.hpp"
#include "templates/quantize_rows.cuh"

namespace kiln::cuda {

void quantize_rows_fp8(const __nv_bfloat16* in, int rows, int k, Fp8Rows out, cudaStream_t stream) {
  if (rows <= 0 || k <= 0 || k % kFp8InputBlock != 0) {
    fail("internal: quantize_rows_fp8 of ", rows, " rows of ", k, " (k must be whole blocks of ", kFp8InputBlock, ")");
  }
  if (reinterpret_cast<uintptr_t>(in) % 16 != 0) {  // the arena's buffers are 256-byte aligned (codegen)
    fail("internal: quantize_rows_fp8's input is not 16-byte aligned");
  }
  if (!out) fail("internal: quantize_rows_fp8 without its output buffers");
  detail::launch_quantize_rows_fp8(in, rows, k, out, stream);
}

}  // namespace kiln::cuda
