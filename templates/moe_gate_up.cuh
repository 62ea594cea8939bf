// DeepSeekMoE routed experts' gate | up projections (ref::moe_gate_up). First buckets the
// (token, slot) pairs by expert into `scratch` (blocks/moe_buckets.cuh), then multiplies each used
// expert's gate | up rows with the rows of the tokens that chose it:
//   T <= 64   streaming kernel: a block takes 16·kWN rows of one used expert and the pairs of that
//             expert (passes of 8 or 16), so each chosen expert is read from DRAM once per call;
//   larger T  grouped tensor-core GEMM over (expert, tile of its pairs, tile of the rows): on
//             Hopper 128 × 256 tiles on wgmma (tile_gemm_wgmma.cuh), elsewhere 64 × 128 on mma.sync.
// Prefill steps (moe_gate_up_prefill) take the GEMM at every T, so that a token's outputs have the
// same bits whatever else is in its step (a prompt alone, chunked or batched with others).
// moe_gate_up_act_prefill is that GEMM with the SwiGLU activation in its epilogue (the fused op
// moe_gate_up_act, codegen/fuse.cpp): it writes silu(gate) ⊙ up, never the gate | up rows.
// Shapes whose rows cannot be read 16 bytes at a time (the tiny test models) stream at every T.
#pragma once

#include "templates/blocks/moe_buckets.cuh"
#include "templates/blocks/stream_rows.cuh"
#include "templates/blocks/tile_gemm.cuh"
#include "templates/blocks/tile_gemm_wgmma.cuh"
#include "templates/common.cuh"
#include "templates/silu_mul.cuh"

namespace kiln {

namespace detail {

// out[p, :] = weight[e] · h[p / kTopK] for every pair p of the expert at used-expert rank
// blockIdx.y, rows [16·kWN·blockIdx.x, +16·kWN) of its 2·kInter; passes of 8·kTT pairs (the
// rows of later passes come from L2).
template <int kExperts, int kTopK, int kHidden, int kInter, int kTT>
__global__ void __launch_bounds__(ExpertStreamShape<2 * kInter, kHidden, kTT>::kThreads)
    moe_gate_up_stream_kernel(const bf16* __restrict__ h, const bf16* __restrict__ weight,
                              const int* __restrict__ scratch, bf16* __restrict__ out) {
  pdl_release_and_wait();
  constexpr int kRows = 2 * kInter;
  using Shape = ExpertStreamShape<kRows, kHidden, kTT>;
  constexpr int WK = Shape::kWK, WN = Shape::kWN;
  __shared__ float partial[WN * WK][128];
  const GroupTile used = locate_group_tile<kExperts>(scratch, blockIdx.y, 0x40000000);
  if (used.group < 0) return;  // fewer used experts than slots: the same answer in every warp
  const int e = used.group, count = used.rows;
  const int* pairs = expert_pairs<kExperts>(scratch, e);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wn = warp / WK, wk = warp % WK, g = lane / 4;
  const int row0 = (blockIdx.x * WN + wn) * 16 + g, row1 = row0 + 8;
  const bf16* w = weight + static_cast<long long>(e) * kRows * kHidden;
  const bf16* w0 = w + static_cast<long long>(min(row0, kRows - 1)) * kHidden;
  const bf16* w1 = w + static_cast<long long>(min(row1, kRows - 1)) * kHidden;

  for (int base = 0; base < count; base += 8 * kTT) {
    const bf16* x[kTT];
    bool x_ok[kTT];
#pragma unroll
    for (int j = 0; j < kTT; ++j) {
      const int i = base + j * 8 + g;
      x_ok[j] = i < count;
      x[j] = h + static_cast<long long>(pairs[min(i, count - 1)] / kTopK) * kHidden;
    }
    float acc[kTT][4];
#pragma unroll
    for (int j = 0; j < kTT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;
    Rows16<kHidden, kTT, WK>::dot(w0, w1, row0 < kRows, row1 < kRows, x, x_ok, wk, acc);

    // Sum the column splits in a fixed order, one token tile at a time.
#pragma unroll
    for (int j = 0; j < kTT; ++j) {
      sum_column_splits<WN, WK, Shape::kThreads>(partial, acc[j], [&](int block_row, int token, float v) {
        const int row = blockIdx.x * WN * 16 + block_row;
        const int pi = base + j * 8 + token;
        if (row < kRows && pi < count) out[static_cast<long long>(pairs[pi]) * kRows + row] = __float2bfloat16_rn(v);
      });
    }
  }
}

template <int kExperts, int kTopK, int kHidden, int kInter, int kTT>
inline void launch_moe_gate_up_stream(const bf16* h, const bf16* weight, const int* scratch, bf16* out, int tokens,
                                      cudaStream_t stream) {
  using Shape = ExpertStreamShape<2 * kInter, kHidden, kTT>;
  auto kernel = moe_gate_up_stream_kernel<kExperts, kTopK, kHidden, kInter, kTT>;
  const dim3 grid(Shape::kRowBlocks, min_int(kExperts, tokens * kTopK));
  KILN_LAUNCH(kernel, grid, Shape::kThreads, 0, stream, h, weight, scratch, out);
}

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
    auto bf16_rounded = [](float v) { return __bfloat162float(__float2bfloat16_rn(v)); };
    const float v0 = silu_mul_value(bf16_rounded(gate0), bf16_rounded(up0));
    const float v1 = silu_mul_value(bf16_rounded(gate1), bf16_rounded(up1));
    store_bf16_columns<kInter>(row, n, v0, v1, two);
  }
};

// Passes of 8 pairs up to 8 tokens, else of 16: an expert rarely has more pairs than that at decode
// (64 tokens × top-6 of 64 experts: 6 on average), and narrow passes leave registers for more
// weight loads in flight. A busier expert takes more passes (its rows come from L2 again).
template <int kExperts, int kTopK, int kHidden, int kInter>
inline void moe_gate_up_streaming(const bf16* h, const bf16* weight, const int* scratch, bf16* out, int tokens,
                                  cudaStream_t stream) {
  if (tokens <= 8) {
    launch_moe_gate_up_stream<kExperts, kTopK, kHidden, kInter, 1>(h, weight, scratch, out, tokens, stream);
  } else {
    launch_moe_gate_up_stream<kExperts, kTopK, kHidden, kInter, 2>(h, weight, scratch, out, tokens, stream);
  }
}

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
  moe_gate_up_streaming<kExperts, kTopK, kHidden, kInter>(h, weight, scratch, out, tokens, stream);
}

}  // namespace detail

// h [T, hidden], weight [experts, 2·inter, hidden], ids [T, top_k] -> out [T, top_k, 2·inter];
// scratch: experts + 1 + T·top_k ints, left holding the buckets for moe_down.
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
  constexpr shape::moe_gate_up kGateUp{.experts = kExperts, .top_k = kTopK, .hidden = kHidden, .inter = kInter};
  moe_gate_up_prefill<kGateUp>(h, weight, ids, gate_up, scratch, tokens, stream);
  silu_mul<shape::silu_mul{.dim = kInter}>(gate_up, act, tokens * kTopK, stream);
}

}  // namespace kiln
