// MLA's absorbed key up-projection (ref::mla_q_absorb): q_mla[t, h] = W_UK[h]ᵀ · q_nope[t, h] |
// q_rope[t, h]. Per head a small matmul sharing one weight matrix across the tokens: the tensor-core
// tile GEMM serves every token count (at decode its 64-token tile holds the whole batch, so each
// head's W_UK tile is read once per call). Shapes the vector path cannot address (rows not 16-byte
// aligned: the tiny test models) take a CUDA-core kernel.
#pragma once

#include "templates/blocks/per_head_gemm.cuh"
#include "templates/blocks/stream_rows.cuh"
#include "templates/blocks/tile_gemm.cuh"
#include "templates/common.cuh"

namespace kiln {

namespace detail {

// One thread per q_mla value: latent columns sum over the nope dims, rope columns are copied.
template <int kHeads, int kNope, int kRope, int kLatent>
__global__ void __launch_bounds__(kElementwiseThreads) mla_q_absorb_simple_kernel(const bf16* __restrict__ q,
                                                                  const bf16* __restrict__ w_uk,
                                                                  bf16* __restrict__ q_mla, long long items) {
  pdl_release_and_wait();
  constexpr int kOut = kLatent + kRope, kIn = kNope + kRope;
  const long long item = static_cast<long long>(blockIdx.x) * kElementwiseThreads + threadIdx.x;
  if (item >= items) return;
  const long long th = item / kOut;  // token · kHeads + head
  const int c = static_cast<int>(item % kOut), h = static_cast<int>(th % kHeads);
  const bf16* qh = q + th * kIn;
  float v;
  if (c < kLatent) {
    v = 0.0f;
    const bf16* w = w_uk + static_cast<long long>(h) * kNope * kLatent + c;
    for (int d = 0; d < kNope; ++d) v += __bfloat162float(qh[d]) * __bfloat162float(w[d * kLatent]);
  } else {
    v = __bfloat162float(qh[kNope + c - kLatent]);
  }
  q_mla[item] = __float2bfloat16_rn(v);
}

// Per head h: q_mla[t, h, :kLatent] = q[t, h, :kNope] · W_UK[h] ([kNope][kLatent]: K-major B);
// the blocks of the first column tile also copy the rope part.
template <int kHeads, int kNope, int kRope, int kLatent>
struct MlaQAbsorbGemm : PerHeadTokenTiles {
  static constexpr int kN = kLatent, kK = kNope;
  static constexpr bool kBKMajor = true;
  static constexpr int kIn = kNope + kRope, kOut = kLatent + kRope;
  struct Args {
    const bf16* q;
    const bf16* w_uk;
    bf16* q_mla;
    int tokens;
  };
  __device__ static const bf16* a_row(const Args& a, int group, int m) {
    return a.q + (static_cast<long long>(m) * kHeads + group) * kIn;
  }
  __device__ static const bf16* b_matrix(const Args& a, int group) {
    return a.w_uk + static_cast<long long>(group) * kNope * kLatent;
  }
  using Row = bf16*;
  __device__ static Row row(const Args& a, int group, int m) {
    return a.q_mla + (static_cast<long long>(m) * kHeads + group) * kOut;
  }
  __device__ static void store(const Args&, Row row, int n, float v0, float v1, bool two) {
    store_bf16_pair(row + n, v0, v1, two);
  }
  __device__ static void prologue(const Args& a, int group, int m0, int rows) {
    if constexpr (kRope > 0) {
      // Vectors that divide the rope start and length in both rows and both row strides.
      constexpr int kVec = vec_width(gcd_int(gcd_int(kNope, kRope), kLatent), 2);
      using Bits = typename BitsOf<kVec>::type;
      constexpr int kPerRow = kRope / kVec;
      for (int i = threadIdx.x; i < rows * kPerRow; i += blockDim.x) {
        const long long th = static_cast<long long>(m0 + i / kPerRow) * kHeads + group;
        const int d = (i % kPerRow) * kVec;
        *reinterpret_cast<Bits*>(a.q_mla + th * kOut + kLatent + d) =
            *reinterpret_cast<const Bits*>(a.q + th * kIn + kNope + d);
      }
    }
  }
};

}  // namespace detail

// q [T, heads, nope + rope], w_uk [heads, nope, latent] -> q_mla [T, heads, latent + rope].
template <shape::mla_q_absorb S>
void mla_q_absorb(const bf16* q, const bf16* w_uk, bf16* q_mla, int tokens, cudaStream_t stream) {
  constexpr int kHeads = S.heads, kNope = S.nope, kRope = S.rope, kLatent = S.latent;
  static_assert(kHeads > 0 && kNope > 0 && kRope >= 0 && kLatent > 0, "mla_q_absorb: sizes must be positive");
  if (tokens <= 0) return;
  if constexpr (kNope % 8 == 0 && kRope % 8 == 0 && kLatent % 8 == 0) {
    using P = detail::MlaQAbsorbGemm<kHeads, kNope, kRope, kLatent>;
    const dim3 grid(detail::ceil_div(kLatent, 64), detail::ceil_div(tokens, 64), kHeads);
    detail::launch_tile_gemm<P, 64>(typename P::Args{q, w_uk, q_mla, tokens}, grid, stream);
  } else {
    const long long items = static_cast<long long>(tokens) * kHeads * (kLatent + kRope);
    auto kernel = detail::mla_q_absorb_simple_kernel<kHeads, kNope, kRope, kLatent>;
    KILN_LAUNCH(kernel, static_cast<int>(detail::ceil_div_ll(items, detail::kElementwiseThreads)),
                detail::kElementwiseThreads, 0, stream, q, w_uk, q_mla, items);
  }
}

}  // namespace kiln
