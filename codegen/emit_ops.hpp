// How a graph op becomes code, rendered from its record (codegen/ops.def): its shape constant in
// model.hpp, its kernel wrapper(s) in kernels.cu, and its calls in forward.cu (prefill and decode)
// and forward_ref.cpp. No switch over op kinds: everything comes from the record.
#pragma once

#include <string>
#include <vector>

#include "codegen/graph.hpp"

namespace kiln::codegen {

struct CudaKernel {
  std::string name;       // wrapper name in kernels.cu
  std::string signature;  // "void rmsnorm_576(const float* x, ..., cudaStream_t stream)"
  std::string body;       // the template call: "kiln::rmsnorm<kRmsnorm576>(x, weight, out, rows, stream);"
  const Op* op;           // the op it runs (a part of the op asked about, where a phase runs the parts)
};

// The op's shape constant, named after its kernel: rmsnorm_576 -> kRmsnorm576.
std::string shape_constant(const Op& op);
// Kernel wrappers the op needs on the GPU (one, or one per phase; none for host calls).
std::vector<CudaKernel> cuda_kernels(const Op& op, const Graph& g);
// Template headers of its wrappers; reference headers of its CPU calls (a fused op's: its parts').
std::vector<std::string> cuda_headers(const Op& op);
std::vector<std::string> ref_headers(const Op& op);
// The statements that run it in `phase`, in a scope where w / lw (weights), the buffers, `step`,
// `ctx`, `kv`, `layer`, `T`, `N` (and on the GPU `stream`) are defined.
std::vector<std::string> op_call(const Op& op, const Graph& g, Phase phase);
// The expression naming a weight field in that scope: per-layer weights live in `lw`, others in `w`.
std::string weight_expr(const Graph& g, const std::string& field);

}  // namespace kiln::codegen
