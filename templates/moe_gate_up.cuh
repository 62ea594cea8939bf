// DeepSeekMoE routed experts' gate | up projections (ref::moe_gate_up). First buckets the
// (token, slot) pairs by expert into `scratch` (blocks/moe_buckets.cuh), then multiplies each used
// expert's gate | up rows with the rows of the tokens that chose it:
//   T <= 64   streaming kernel (blocks/moe_stream.cuh): a block takes 16·kWN rows of one used
//             expert and the pairs of that expert (passes of 8 or 16), so each chosen expert is
//             read from DRAM once per call;
//   larger T  grouped tensor-core GEMM over (expert, tile of its pairs, tile of the rows): on
//             Hopper 192 × 256 tiles on wgmma (tile_gemm_wgmma.cuh), elsewhere 64 × 128 on mma.sync.
// Prefill steps (moe_gate_up_prefill) take the GEMM at every T, so that a token's outputs have the
// same bits whatever else is in its step (a prompt alone, chunked or batched with others).
// The fused op moe_gate_up_act (codegen/fuse.cpp) writes silu(gate) ⊙ up, never the gate | up
// rows: at decode (moe_gate_up_act) the streaming kernel with each warp's rows a feature's gate and
// up rows; at prefill (moe_gate_up_act_prefill) the GEMM with the activation in its epilogue.
// Shapes whose rows cannot be read 16 bytes at a time (the tiny test models) stream at every T.
#pragma once

#include "templates/blocks/moe_buckets.cuh"
#include "templates/blocks/moe_stream.cuh"
#include "templates/blocks/tile_gemm.cuh"
#include "templates/blocks/tile_gemm_wgmma.cuh"
#include "templates/common.cuh"
#include "templates/silu_mul.cuh"

namespace kiln {

namespace detail {

// out[p] = weight[e] · h[p / kTopK] for the pairs p of expert e.
template <int kExperts, int kTopK, int kHidden, int kInter>
struct MoeGateUpGemm : ExpertPairTiles<kExperts> {
  using ExpertPairTiles<kExperts>::pair;
  static constexpr int kN = 2 * kInter, kK = kHidden;
  static constexpr bool kBKMajor = false;
  struct Args {
    const bf16* h;
    const bf16* weight;
    const int* scratch;
    bf16* out;
  };
  __device__ static const bf16* a_row(const Args& a, int group, int m) {
    return a.h + static_cast<long long>(pair(a, group, m) / kTopK) * kHidden;
  }
  __device__ static const bf16* b_matrix(const Args& a, int group) {
    return a.weight + static_cast<long long>(group) * kN * kK;
  }
  using Row = bf16*;
  __device__ static Row row(const Args& a, int group, int m) {
    return a.out + static_cast<long long>(pair(a, group, m)) * kN;
  }
  __device__ static void store(const Args&, Row row, int n, float v0, float v1, bool two) {
    store_bf16_columns<kN>(row, n, v0, v1, two);
  }
};

// act[p] = silu(gate) ⊙ up of weight[e] · h[p / kTopK] for the pairs p of expert e: the gated GEMM
// (tile_gemm_wgmma.cuh), with MoeGateUpGemm's arguments, `out` the act rows [pairs][kInter]. Gate
// and up are rounded to bf16 first, as moe_gate_up stores them and silu_mul reads them back: the
// same bits as the two ops.
template <int kExperts, int kTopK, int kHidden, int kInter>
struct MoeGateUpActGemm : MoeGateUpGemm<kExperts, kTopK, kHidden, kInter> {
  using Base = MoeGateUpGemm<kExperts, kTopK, kHidden, kInter>;
  using typename Base::Args;
  static constexpr bool kGated = true;
  using Row = bf16*;
  __device__ static Row row(const Args& a, int group, int m) {
    return a.out + static_cast<long long>(Base::pair(a, group, m)) * kInter;
  }
  __device__ static void store_gated(const Args&, Row row, int n, float gate0, float gate1, float up0, float up1,
                                     bool two) {
    store_bf16_columns<kInter>(row, n, silu_mul_of_sums(gate0, up0), silu_mul_of_sums(gate1, up1), two);
  }
};

// The streaming kernel's problems (moe_stream.cuh): pair p's input is its token's row of h.
template <int kExperts, int kTopK, int kHidden, int kInter>
struct MoeGateUpStream {
  static constexpr int kRows = 2 * kInter, kK = kHidden;
  struct Args {
    const bf16* h;
    const bf16* weight;
    const int* scratch;
    bf16* out;  // gate | up rows [pairs][2·kInter], or gated: act rows [pairs][kInter]
  };
  __device__ static const bf16* weight(const Args& a, int e) {
    return a.weight + static_cast<long long>(e) * kRows * kK;
  }
  __device__ static const bf16* input(const Args& a, int p) { return a.h + static_cast<long long>(p / kTopK) * kHidden; }
  __device__ static void store(const Args& a, int p, int row, float v) {
    a.out[static_cast<long long>(p) * kRows + row] = __float2bfloat16_rn(v);
  }
};

// silu(gate) ⊙ up of the gate and up sums, each rounded to bf16 first as moe_gate_up stores them and
// silu_mul reads them back: the same bits as the two ops.
template <int kExperts, int kTopK, int kHidden, int kInter>
struct MoeGateUpActStream : MoeGateUpStream<kExperts, kTopK, kHidden, kInter> {
  using typename MoeGateUpStream<kExperts, kTopK, kHidden, kInter>::Args;
  static constexpr bool kGated = true;
  __device__ static void store_gated(const Args& a, int p, int f, float gate, float up) {
    a.out[static_cast<long long>(p) * kInter + f] = __float2bfloat16_rn(silu_mul_of_sums(gate, up));
  }
};

}  // namespace detail

namespace detail {

// Buckets, then the GEMM at any T (stream_below: up to that many tokens stream instead).
template <shape::moe_gate_up S>
void moe_gate_up_impl(const bf16* h, const bf16* weight, const int* ids, bf16* out, int* scratch, int tokens,
                      int stream_below, cudaStream_t stream) {
  constexpr int kExperts = S.experts, kTopK = S.top_k, kHidden = S.hidden, kInter = S.inter;
  static_assert(kExperts > 0 && kTopK > 0 && kHidden > 0 && kInter > 0, "moe_gate_up: sizes must be positive");
  if (tokens <= 0) return;
  launch_moe_bucket<kExperts, kTopK>(ids, scratch, tokens, stream);
  if constexpr (kHidden % 8 == 0) {
    if (tokens > stream_below) {
      using P = MoeGateUpGemm<kExperts, kTopK, kHidden, kInter>;
      launch_expert_gemm<P, kExperts, kTopK>(typename P::Args{h, weight, scratch, out}, tokens, stream);
      return;
    }
  }
  using P = MoeGateUpStream<kExperts, kTopK, kHidden, kInter>;
  launch_moe_stream<P, kExperts, kTopK, S.sms>(typename P::Args{h, weight, scratch, out}, tokens, stream);
}

}  // namespace detail

// h [T, hidden], weight [experts, 2·inter, hidden], ids [T, top_k] -> out [T, top_k, 2·inter];
// scratch: T · moe_scratch_ints_per_token ints, left holding the buckets for moe_down.
template <shape::moe_gate_up S>
void moe_gate_up(const bf16* h, const bf16* weight, const int* ids, bf16* out, int* scratch, int tokens,
                 cudaStream_t stream) {
  detail::moe_gate_up_impl<S>(h, weight, ids, out, scratch, tokens, detail::kMoeStreamTokens, stream);
}

// Prefill steps: as moe_gate_up, the GEMM at every T (see the top).
template <shape::moe_gate_up S>
void moe_gate_up_prefill(const bf16* h, const bf16* weight, const int* ids, bf16* out, int* scratch, int tokens,
                         cudaStream_t stream) {
  detail::moe_gate_up_impl<S>(h, weight, ids, out, scratch, tokens, 0, stream);
}

// Prefill steps of the fused op moe_gate_up_act: act [T, top_k, inter] = silu(gate) ⊙ up of each
// token's chosen experts. On Hopper one gated GEMM (gate_up untouched); elsewhere, and for rows
// that cannot be read 16 bytes at a time, moe_gate_up_prefill into gate_up and then silu_mul (the
// same bits either way). scratch is left holding the buckets for moe_down.
template <shape::moe_gate_up_act S>
void moe_gate_up_act_prefill(const bf16* h, const bf16* weight, const int* ids, bf16* gate_up, bf16* act, int* scratch,
                             int tokens, cudaStream_t stream) {
  constexpr int kExperts = S.experts, kTopK = S.top_k, kHidden = S.hidden, kInter = S.inter;
  static_assert(kExperts > 0 && kTopK > 0 && kHidden > 0 && kInter > 0, "moe_gate_up_act: sizes must be positive");
  if (tokens <= 0) return;
  if constexpr (kHidden % 8 == 0) {
    if (detail::wgmma_device()) {
      detail::launch_moe_bucket<kExperts, kTopK>(ids, scratch, tokens, stream);
      using P = detail::MoeGateUpActGemm<kExperts, kTopK, kHidden, kInter>;
      detail::launch_expert_gemm_wgmma<P, kExperts, kTopK>(typename P::Args{h, weight, scratch, act}, tokens, stream);
      return;
    }
  }
  constexpr shape::moe_gate_up kGateUp{.experts = kExperts, .top_k = kTopK, .hidden = kHidden, .inter = kInter, .sms = S.sms};
  moe_gate_up_prefill<kGateUp>(h, weight, ids, gate_up, scratch, tokens, stream);
  silu_mul<shape::silu_mul{.dim = kInter}>(gate_up, act, tokens * kTopK, stream);
}

// Decode steps of the fused op moe_gate_up_act: up to 64 tokens the streaming kernel with the
// activation applied (the same bits as moe_gate_up + silu_mul); above, moe_gate_up_act_prefill's
// path. gate_up is written only on that path's fallback; scratch is left holding the buckets.
template <shape::moe_gate_up_act S>
void moe_gate_up_act(const bf16* h, const bf16* weight, const int* ids, bf16* gate_up, bf16* act, int* scratch,
                     int tokens, cudaStream_t stream) {
  if (tokens <= 0 || tokens > detail::kMoeStreamTokens) {  // (its checks of S are the prefill's)
    moe_gate_up_act_prefill<S>(h, weight, ids, gate_up, act, scratch, tokens, stream);
    return;
  }
  detail::launch_moe_bucket<S.experts, S.top_k>(ids, scratch, tokens, stream);
  using P = detail::MoeGateUpActStream<S.experts, S.top_k, S.hidden, S.inter>;
  detail::launch_moe_stream<P, S.experts, S.top_k, S.sms>(typename P::Args{h, weight, scratch, act}, tokens, stream);
}

}  // namespace kiln
