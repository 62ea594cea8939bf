// SwiGLU activation: act[t, i] = silu(gate[t, i]) · up[t, i], rows of gate_up = [gate dim | up dim]
// (ref::silu_mul). fp32 math from the bf16 inputs, rounded once (HF rounds silu(g) to bf16 before
// the product; we keep fp32, which is closer to the exact value).
#pragma once

#include "templates/common.cuh"

namespace kiln {

namespace detail {

// silu(gate) · up of one feature, in fp32 (the whole-step decode kernel computes the same value).
__device__ __forceinline__ float silu_mul_value(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

template <int kDim, int kVec>
__global__ void __launch_bounds__(kElementwiseThreads) silu_mul_kernel(const bf16* __restrict__ gate_up, bf16* __restrict__ act,
                                                       long long vectors) {
  pdl_release_and_wait();
  constexpr int kPerRow = kDim / kVec;
  const long long item = static_cast<long long>(blockIdx.x) * kElementwiseThreads + threadIdx.x;
  if (item >= vectors) return;
  const long long t = item / kPerRow;
  const int i = static_cast<int>(item % kPerRow) * kVec;
  const bf16* g = gate_up + t * 2 * kDim + i;
  float gate[kVec], up[kVec], out[kVec];
  load_bf16<kVec>(g, gate);
  load_bf16<kVec>(g + kDim, up);
#pragma unroll
  for (int j = 0; j < kVec; ++j) out[j] = silu_mul_value(gate[j], up[j]);
  store_bf16<kVec>(act + t * kDim + i, out);
}

}  // namespace detail

template <shape::silu_mul S>
void silu_mul(const bf16* gate_up, bf16* act, int rows, cudaStream_t stream) {
  constexpr int kDim = S.dim;
  static_assert(kDim > 0, "silu_mul: dim must be positive");
  if (rows <= 0) return;
  constexpr int kVec = detail::vec_width(kDim, 2);  // gate, up and act rows all start at multiples of kDim
  const long long vectors = static_cast<long long>(rows) * (kDim / kVec);
  const int blocks = static_cast<int>(detail::ceil_div_ll(vectors, detail::kElementwiseThreads));
  auto kernel = detail::silu_mul_kernel<kDim, kVec>;
  KILN_LAUNCH(kernel, blocks, detail::kElementwiseThreads, 0, stream, gate_up, act, vectors);
}

}  // namespace kiln
