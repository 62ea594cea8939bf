// The prefill's FP8 GEMM (gemm.hpp's run_fp8) multiplies E4M3 weights by E4M3 inputs, each token's
// bf16 row quantized per 128 columns or per row (templates/fp8_rows.hpp: 1.5-1.7× the bf16 GEMM's speed at
// 2048 rows on an H200, bench/RESULTS.md). This pass makes them where the op before the projection
// did not (the attention's output, or a pair codegen/fuse.cpp did not fuse).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "templates/fp8_rows.hpp"

namespace kiln::cuda {

// rows × k bf16 (k a multiple of 128) -> `out`'s codes [padded][k] E4M3 and scales [k / 128][padded]
// fp32 (per 128 columns, or per row where out.row_scale), padded = fp8_gemm_rows(rows), as
// templates/fp8_rows.hpp says.
void quantize_rows_fp8(const __nv_bfloat16* in, int rows, int k, Fp8Rows out, cudaStream_t stream);

}  // namespace kiln::cuda
