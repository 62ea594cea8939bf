// How each graph op becomes code: its kernel wrapper(s) in kernels.cu, its call in forward.cu
// (prefill and decode) and its call in forward_ref.cpp. One place per op kind (emit_cuda_ops.cpp).
#pragma once

#include <string>
#include <vector>

#include "codegen/graph.hpp"

namespace kiln::codegen {

enum class Phase { prefill, decode };

struct CudaKernel {
  std::string name;       // wrapper name in kernels.cu
  std::string signature;  // "void rmsnorm_576(const float* x, ...)"
  std::string body;       // the template call with the model's constants
};

// Kernel wrappers an op needs (none for linear in prefill: that is cuBLASLt).
std::vector<CudaKernel> cuda_kernels(const Op& op, const Graph& g);
// Template headers (templates/*.cuh) the op's wrappers use, and the reference ops' headers.
std::vector<std::string> cuda_headers(const Op& op);
std::vector<std::string> ref_headers(const Op& op);
// One statement of the generated CUDA forward, in a scope where w / lw (weights), the buffers,
// `step`, `ctx`, `kv`, `T`, `N` and `stream` are defined.
std::string cuda_call(const Op& op, const Graph& g, Phase phase);
// One or more statements of the generated reference forward (same scope, ref types).
std::vector<std::string> ref_call(const Op& op, const Graph& g);

}  // namespace kiln::codegen
