// DeepSeekMoE routed experts' down projections, weighted and added into the residual
// (ref::moe_down). Reuses the buckets moe_gate_up left in scratch. Each pair's down projection is
// stored in `pairs` (bf16, as HF rounds an expert's output; half the bytes of fp32), then every
// token's pairs are weighted and added into x in slot order: the same bits for a token whatever
// else is in its step, at decode and at prefill alike. Where `shared` is given (the shared
// experts' fp32 output, computed beside the routed ones on one GPU), the sum then adds it too:
// x + routed, then + shared, the two roundings of a shared projection adding into x after it.
// The pairs come from
//   moe_down           (decode) T <= 64: the streaming kernel (blocks/moe_stream.cuh): a block
//                      takes 16·kWN rows of one used expert and that expert's pairs, so the
//                      chosen experts are read from DRAM once and all at once (DeepSeek-V2-Lite at
//                      one token on an H200: 27.6 us -> 16.0 + 3.0 for the sum, where one block
//                      per 16 output rows had gone over the used experts one after another);
//                      larger T as the prefill.
//   moe_down_prefill   the grouped GEMM at every T (on Hopper: 192 × 256 tiles on wgmma,
//                      tile_gemm_wgmma.cuh); shapes whose rows cannot be read 16 bytes at a time
//                      stream at every T.
#pragma once

#include "templates/blocks/moe_buckets.cuh"
#include "templates/blocks/moe_stream.cuh"
#include "templates/blocks/tile_gemm.cuh"
#include "templates/blocks/tile_gemm_wgmma.cuh"
#include "templates/common.cuh"

namespace kiln {

namespace detail {

// pairs[p, :] = weight[e] · act[p] for the pairs p of expert e (bf16, plain stores; weighted when
// summed): the grouped GEMM's problem.
template <int kExperts, int kTopK, int kHidden, int kInter>
struct MoeDownPairsGemm : ExpertPairTiles<kExperts> {
  using ExpertPairTiles<kExperts>::pair;
  static constexpr int kN = kHidden, kK = kInter;
  static constexpr bool kBKMajor = false;
  struct Args {
    const bf16* act;
    const bf16* weight;
    const int* scratch;
    bf16* pairs;
  };
  __device__ static const bf16* a_row(const Args& a, int group, int m) {
    return a.act + static_cast<long long>(pair(a, group, m)) * kInter;
  }
  __device__ static const bf16* b_matrix(const Args& a, int group) {
    return a.weight + static_cast<long long>(group) * kN * kK;
  }
  using Row = bf16*;
  __device__ static Row row(const Args& a, int group, int m) {
    return a.pairs + static_cast<long long>(pair(a, group, m)) * kHidden;
  }
  __device__ static void store(const Args&, Row row, int n, float v0, float v1, bool two) {
    store_bf16_columns<kHidden>(row, n, v0, v1, two);
  }
};

// The same pairs from the streaming kernel (moe_stream.cuh): pair p's input is its act row.
template <int kExperts, int kTopK, int kHidden, int kInter>
struct MoeDownPairsStream {
  static constexpr int kRows = kHidden, kK = kInter;
  using Args = typename MoeDownPairsGemm<kExperts, kTopK, kHidden, kInter>::Args;
  __device__ static const bf16* weight(const Args& a, int e) {
    return a.weight + static_cast<long long>(e) * kRows * kK;
  }
  __device__ static const bf16* input(const Args& a, int p) { return a.act + static_cast<long long>(p) * kInter; }
  __device__ static void store(const Args& a, int p, int row, float v) {
    a.pairs[static_cast<long long>(p) * kHidden + row] = __float2bfloat16_rn(v);
  }
};

// x[t, n] += Σ_j weights[t · kTopK + j] · pairs[t · kTopK + j, n] over the slots j whose expert is on
// this rank (ids >= 0), j ascending, in fp32; then x[t, n] += shared[t, n] where shared is given.
// kVec columns per thread.
template <int kTopK, int kHidden, int kVec>
__global__ void __launch_bounds__(kElementwiseThreads)
    moe_down_sum_pairs_kernel(const bf16* __restrict__ pairs, const int* __restrict__ ids,
                              const float* __restrict__ weights, const float* __restrict__ shared,
                              float* __restrict__ x, long long vectors) {
  pdl_release_and_wait();
  constexpr int kPerRow = kHidden / kVec;
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= vectors) return;
  const long long t = i / kPerRow;
  const int c = static_cast<int>(i % kPerRow) * kVec;
  float sum[kVec] = {};
#pragma unroll
  for (int j = 0; j < kTopK; ++j) {
    const long long p = t * kTopK + j;
    if (ids[p] < 0) continue;  // another rank's expert: not computed here
    const float w = weights[p];
    float v[kVec];
    load_bf16<kVec>(pairs + p * kHidden + c, v);
#pragma unroll
    for (int k = 0; k < kVec; ++k) sum[k] += w * v[k];
  }
  float* dst = x + t * kHidden + c;
  const float* add = shared == nullptr ? nullptr : shared + t * kHidden + c;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    float v = dst[k] + sum[k];
    if (add != nullptr) v += add[k];
    dst[k] = v;
  }
}

template <int kTopK, int kHidden>
inline void launch_moe_down_sum_pairs(const bf16* pairs, const int* ids, const float* weights, const float* shared,
                                      float* x, int tokens, cudaStream_t stream) {
  constexpr int kVec = kHidden % 4 == 0 ? 4 : kHidden % 2 == 0 ? 2 : 1;
  const long long vectors = static_cast<long long>(tokens) * (kHidden / kVec);
  KILN_LAUNCH((moe_down_sum_pairs_kernel<kTopK, kHidden, kVec>),
              static_cast<int>(ceil_div_ll(vectors, kElementwiseThreads)), kElementwiseThreads, 0, stream, pairs, ids,
              weights, shared, x, vectors);
}

// Each pair's down projection into `pairs` (the grouped GEMM; the streaming kernel up to
// stream_below tokens and for rows it cannot read 16 bytes at a time), then each token's weighted sum.
template <shape::moe_down S>
void moe_down_impl(const bf16* act, const bf16* weight, const int* ids, const float* weights, const int* scratch,
                   bf16* pairs, const float* shared, float* x, int tokens, int stream_below, cudaStream_t stream) {
  constexpr int kExperts = S.experts, kTopK = S.top_k, kHidden = S.hidden, kInter = S.inter;
  static_assert(kExperts > 0 && kTopK > 0 && kHidden > 0 && kInter > 0, "moe_down: sizes must be positive");
  if (tokens <= 0) return;
  const typename MoeDownPairsGemm<kExperts, kTopK, kHidden, kInter>::Args args{act, weight, scratch, pairs};
  constexpr bool kTiles = kInter % 8 == 0 && kHidden % 8 == 0;
  const bool gemm = kTiles && tokens > stream_below;
  if constexpr (kTiles) {
    if (gemm) launch_expert_gemm<MoeDownPairsGemm<kExperts, kTopK, kHidden, kInter>, kExperts, kTopK>(args, tokens, stream);
  }
  if (!gemm) launch_moe_stream<MoeDownPairsStream<kExperts, kTopK, kHidden, kInter>, kExperts, kTopK, S.sms>(args, tokens, stream);
  launch_moe_down_sum_pairs<kTopK, kHidden>(pairs, ids, weights, shared, x, tokens, stream);
}

}  // namespace detail

// act [T, top_k, inter], weight [experts, hidden, inter]: x[t] += Σ_j weights[t, j] ·
// weight[ids[t, j]] · act[t, j], then x[t] += shared[t] where shared ([T, hidden] fp32) is given.
// Needs the buckets moe_gate_up left in scratch for these ids. pairs: [T, top_k, hidden] bf16,
// written before it is read (moe_down_pair_values_per_token).
template <shape::moe_down S>
void moe_down(const bf16* act, const bf16* weight, const int* ids, const float* weights, const int* scratch,
              bf16* pairs, const float* shared, float* x, int tokens, cudaStream_t stream) {
  detail::moe_down_impl<S>(act, weight, ids, weights, scratch, pairs, shared, x, tokens, detail::kMoeStreamTokens,
                           stream);
}

// Prefill steps: the grouped GEMM at every T (see the top).
template <shape::moe_down S>
void moe_down_prefill(const bf16* act, const bf16* weight, const int* ids, const float* weights, const int* scratch,
                      bf16* pairs, const float* shared, float* x, int tokens, cudaStream_t stream) {
  detail::moe_down_impl<S>(act, weight, ids, weights, scratch, pairs, shared, x, tokens, 0, stream);
}

// bf16 values per token of moe_down's `pairs` (the generator's kMoeTokenDownWidth).
template <shape::moe_down S>
constexpr int moe_down_pair_values_per_token() {
  return S.top_k * S.hidden;
}

}  // namespace kiln
