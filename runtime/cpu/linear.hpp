// The projection op of the fast CPU backend: out[t, :] (= or +=, by s.out) in[t, :] · weight[n, k]ᵀ
// over a weight in a stored format (bf16 rows, the block formats of weight_matrix.hpp, or two of
// those in two parts: CpuMatrix::split), its rows split over the pool's threads
// (runtime/core/parallel.hpp). Block formats take the activations quantized per 32 values in two
// 8-bit parts (quant_dot.hpp), a prefill's on AMX-INT8 where the processor has it (quant_amx.hpp);
// bf16 rows run on AMX where the processor has it (bf16_amx.hpp), else on AVX-512 BF16
// (bf16_avx512.hpp), else as fp32 products (quant_dot.hpp).
#pragma once

#include <cstdint>

#include "codegen/op_shapes.hpp"
#include "templates/weight_matrix.hpp"

namespace kiln::cpu {

void linear(const shape::linear& s, const float* in, CpuMatrix weight, float* out, int64_t tokens);

// ", AMX-INT8" where the block formats' prefill runs on it (quant_amx.hpp), else "".
const char* block_isa_suffix();

// The instructions bf16 rows run on where not dot_isa()'s fp32 products: ", AMX-BF16",
// ", AVX-512 BF16", or "" (for the backend's device line).
const char* bf16_isa_suffix();

}  // namespace kiln::cpu
