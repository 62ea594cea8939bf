// MLA's prep of a step's rows, the fused op mla_prep (codegen/fuse.cpp): four ops in one launch,
//   c_kv   = RMSNorm(kv_a[:, :latent]) · kv_a_layernorm      (rmsnorm_inplace.cuh)
//   q_rope = RoPE(q[:, head, nope:])   for every head        (rope.cuh, interleaved pairs)
//   k_rope = RoPE(kv_a[:, latent:])                          (rope.cuh, interleaved pairs)
//   latent_cache[slot] = c_kv | k_rope                       (mla_kv_write.cuh)
// with each op's own float operations (the same norm pieces, vector width and lanes; the same pair
// rotation), so the same bits as the four. q is rotated in place; c_kv and k_rope go to the cache
// only (no op after the prep reads kv_a). A launch costs ~2.4 us of a DeepSeek-V2-Lite decode step
// on an H200 whatever it does, and these four did next to nothing each.
#pragma once

#include "templates/blocks/row_norm.cuh"
#include "templates/common.cuh"
#include "templates/kv_layout.hpp"
#include "templates/rope.cuh"

namespace kiln {

namespace detail {

constexpr int kMlaPrepThreads = 256;

// One block per token: warp 0 normalizes c_kv into the cache row, the other threads rotate k_rope
// (into the cache row) and every head's q_rope (in place).
template <int kHeads, int kNope, int kRope, int kLatent>
__global__ void __launch_bounds__(kMlaPrepThreads)
    mla_prep_kernel(bf16* __restrict__ q, const bf16* __restrict__ kv_a, const bf16* __restrict__ norm_weight,
                    const int* __restrict__ positions, const float* __restrict__ table,
                    const int* __restrict__ slot_mapping, bf16* __restrict__ cache, float eps) {
  pdl_release_and_wait();
  constexpr int kWidth = kLatent + kRope, kHeadDim = kNope + kRope, kHalf = kRope / 2;
  // rmsnorm_inplace's width for these rows (dim kLatent of rows of kWidth): the same sums.
  constexpr int kVec = vec_width(gcd_int(kLatent, kWidth), 2);
  constexpr int kSteps = ceil_div(kLatent, 32 * kVec);
  const long long t = blockIdx.x;
  const int slot = slot_mapping[t];  // negative: a padding token, no cache row
  const float2* cs = reinterpret_cast<const float2*>(table) + static_cast<long long>(positions[t]) * kHalf;
  const bf16* kv = kv_a + t * kWidth;
  bf16* out = cache + LatentLayout{kWidth}.row(slot < 0 ? 0 : slot);
  const int tid = threadIdx.x;

  if (tid < 32) {
    float v[kSteps][kVec];
    const float scale = rms_scale(head_sum_sq<kLatent, kVec, 32>(kv, tid, true, v), kLatent, eps);
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int i = (s * 32 + tid) * kVec;
      if (i < kLatent && slot >= 0) {
        float w[kVec], y[kVec];
        load_bf16<kVec>(norm_weight + i, w);
        rms_apply<kVec>(v[s], scale, w, y);
        store_bf16<kVec>(out + i, y);
      }
    }
    return;
  }
  // k_rope: pair i is (latent + 2i, latent + 2i + 1); rotated from kv_a into the cache row.
  for (int i = tid - 32; i < kHalf && slot >= 0; i += kMlaPrepThreads - 32) {
    bf16 a = kv[kLatent + 2 * i], b = kv[kLatent + 2 * i + 1];
    rope_rotate(&a, &b, cs[i]);
    out[kLatent + 2 * i] = a;
    out[kLatent + 2 * i + 1] = b;
  }
  // q_rope of every head, in place.
  bf16* qt = q + t * kHeads * kHeadDim;
  for (int i = tid - 32; i < kHeads * kHalf; i += kMlaPrepThreads - 32) {
    bf16* head = qt + (i / kHalf) * kHeadDim + kNope;
    const int pair = i % kHalf;
    rope_rotate(head + 2 * pair, head + 2 * pair + 1, cs[pair]);
  }
}

}  // namespace detail

// q [T, heads · (nope + rope)] (rotated in place), kv_a [T, latent + rope] (read), the layer's latent
// cache [pages · page_size][latent + rope]; table [position][rope / 2] (cos, sin).
template <shape::mla_prep S>
void mla_prep(bf16* q, const bf16* kv_a, const bf16* norm_weight, const int* positions, const float* rope,
              const int* slot_mapping, bf16* cache, int tokens, cudaStream_t stream) {
  static_assert(S.heads > 0 && S.nope > 0 && S.rope > 0 && S.rope % 2 == 0 && S.latent > 0 && S.page_size > 0,
                "mla_prep: sizes must be positive, rope even");
  if (tokens <= 0) return;
  auto kernel = detail::mla_prep_kernel<S.heads, S.nope, S.rope, S.latent>;
  KILN_LAUNCH(kernel, tokens, detail::kMlaPrepThreads, 0, stream, q, kv_a, norm_weight, positions, rope, slot_mapping,
              cache, S.eps);
}

}  // namespace kiln
