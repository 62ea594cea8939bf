// Prefill projections through cuBLASLt: out[rows, n] (=|+=) in[rows, k] · weight[n, k]ᵀ with bf16
// operands and fp32 accumulation. Decode uses our own GEMV kernels (templates/gemv.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <memory>

#include "runtime/cuda/context.hpp"

namespace kiln::cuda {

enum class GemmOut {
  store_bf16,  // out is bf16 [rows, n]
  add_f32,     // out is fp32 [rows, n] and receives the product added (the residual stream)
  store_f32,   // out is fp32 [rows, n] (logits)
};

// Owns the cuBLASLt handle, its workspace and the chosen algorithms per shape.
class GemmRunner {
 public:
  GemmRunner();
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  void run(const __nv_bfloat16* in, const __nv_bfloat16* weight, void* out, int rows, int n, int k, GemmOut mode,
           cudaStream_t stream);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The call the generated forward makes.
inline void gemm(const CudaContext& ctx, const __nv_bfloat16* in, const __nv_bfloat16* weight, void* out, int rows,
                 int n, int k, GemmOut mode) {
  ctx.gemm->run(in, weight, out, rows, n, k, mode, ctx.stream);
}

}  // namespace kiln::cuda
