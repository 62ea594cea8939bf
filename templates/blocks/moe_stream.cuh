// The routed experts' streaming kernel (decode; and every step of the shapes whose rows the tile
// GEMMs cannot read 16 bytes at a time): a block takes 16·kWN weight rows of one used expert and
// multiplies them with the input rows of every pair routed to that expert, in passes of 8·kTT
// pairs (later passes read the rows again from L2), so each chosen expert is read from DRAM once
// per call. grid: (row blocks, used-expert slots); a slot past the used experts returns.
//
// A problem P says what the rows and pairs are:
//   kRows, kK            the expert's weight rows and their length
//   Args                 the kernel's argument struct; args.scratch holds the buckets (moe_buckets.cuh)
//   weight(a, e)         expert e's [kRows][kK] rows
//   input(a, p)          pair p's input row (kK values)
//   store(a, p, row, v)  pair p's output at `row`
// A gated problem (P::kGated: SwiGLU's gate | up rows, kRows = 2·kInter) pairs each warp's rows g
// and g + 8 as feature f's gate row f and up row kInter + f, so a block covers 8·kWN features of
// both halves and hands store_gated(a, p, f, gate, up) both sums: the activation is applied in
// the same kernel. Either way every output is the same sum in the same order (the warps' column
// splits added in warp order), so gate and up come out with the bits of the ungated problem.
#pragma once

#include "templates/blocks/moe_buckets.cuh"
#include "templates/blocks/stream_rows.cuh"
#include "templates/common.cuh"

namespace kiln::detail {

template <class P>
constexpr bool kGatedStream = requires { requires P::kGated; };

// Warps of a streaming block: kWN row tiles × kWK column splits, 8 warps in all.
template <int kWK>
struct MoeStreamWarps {
  static_assert(kWK == 1 || kWK == 2 || kWK == 4 || kWK == 8, "moe_stream: 1, 2, 4 or 8 column splits");
  static constexpr int kWN = 8 / kWK;
  static constexpr int kThreads = 256;
};

// Blocks of the streaming kernel a used expert takes (grid.x): 16·kWN rows a block, ungated; gated,
// 8·kWN features of both halves, the same count (gated rows are even: rows / 2 over 8·kWN).
constexpr int moe_stream_row_blocks(int rows, int wn) { return ceil_div(rows, 16 * wn); }

// Resident blocks of the streaming kernel per SM: two blocks of 256 threads fit an SM's 64K
// registers at 128 a thread, which ptxas keeps to at 2 to 8 splits (sm_90a, DeepSeek-V2-Lite's
// shapes). Holding it there with __launch_bounds__'s minimum of 2 spills instead at one split (148
// bytes for down), which bench_kernels --moe-decode timed 20% slower (H200, 2026-12-04).
constexpr int kMoeStreamBlocksPerSm = 2;

// The column splits of a projection's streaming kernel (rows × k, gated or not, top_k of `experts`
// a token) on a target of `sms` SMs: the most splits (8, 4, 2, each warp taking at least 4 of a
// row's 32-column steps; else 1) whose one-token grid (row blocks × top_k) is one wave of resident
// blocks. More splits make more, shorter warps, too few loads in flight each to keep DRAM busy
// (and the splits' sum costs more); fewer leave SMs without a block at one token. Fixed per build,
// whatever the step's token count, so that a token's sums add in the same order alone or batched;
// the SM count only sizes the split (any GPU runs it), as for the GEMV. DeepSeek-V2-Lite at 132
// SMs: 2 for gate_up (44 row blocks × 6) and down (32 × 6), the fastest of 8, 4, 2, 1 at one token
// for both in bench_kernels --moe-decode (H200, bench/RESULTS.md 2026-12-04).
constexpr int moe_stream_splits(int rows, int k, int top_k, int experts, int sms) {
  const int one_token = top_k < experts ? top_k : experts;
  for (int wk = 8; wk > 1; wk /= 2) {
    const bool long_enough = ceil_div(k, 32) >= 4 * wk;
    if (long_enough && moe_stream_row_blocks(rows, 8 / wk) * one_token <= kMoeStreamBlocksPerSm * sms) return wk;
  }
  return 1;
}

template <class P, int kExperts, int kTT, int kWK>
__global__ void __launch_bounds__(MoeStreamWarps<kWK>::kThreads)
    moe_stream_kernel(const typename P::Args args) {
  pdl_release_and_wait();
  constexpr int kRows = P::kRows, kK = P::kK;
  constexpr bool kGated = kGatedStream<P>;
  using Shape = MoeStreamWarps<kWK>;
  constexpr int WK = kWK, WN = Shape::kWN;
  static_assert(!kGated || kRows % 2 == 0, "moe_stream: gated rows are two halves");
  __shared__ float partial[WN * WK][128];
  const GroupTile used = locate_group_tile<kExperts>(args.scratch, blockIdx.y, 0x40000000);
  if (used.group < 0) return;  // fewer used experts than slots: the same answer in every warp
  const int e = used.group, count = used.rows;
  const int* pairs = expert_pairs<kExperts>(args.scratch, e);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wn = warp / WK, wk = warp % WK, g = lane / 4;
  // Ungated: rows tile·16 + g and + 8. Gated: feature tile·8 + g's gate and up rows.
  const int tile = blockIdx.x * WN + wn;
  const int row0 = kGated ? tile * 8 + g : tile * 16 + g;
  const int row1 = kGated ? row0 + kRows / 2 : row0 + 8;
  const bool ok0 = kGated ? row0 < kRows / 2 : row0 < kRows, ok1 = kGated ? ok0 : row1 < kRows;
  const bf16* w = P::weight(args, e);
  const bf16* w0 = w + static_cast<long long>(ok0 ? row0 : 0) * kK;
  const bf16* w1 = w + static_cast<long long>(ok1 ? row1 : 0) * kK;

  for (int base = 0; base < count; base += 8 * kTT) {
    const bf16* x[kTT];
    bool x_ok[kTT];
#pragma unroll
    for (int j = 0; j < kTT; ++j) {
      const int i = base + j * 8 + g;
      x_ok[j] = i < count;
      x[j] = P::input(args, pairs[min(i, count - 1)]);
    }
    float acc[kTT][4];
#pragma unroll
    for (int j = 0; j < kTT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;
    Rows16<kK, kTT, WK>::dot(w0, w1, ok0, ok1, x, x_ok, wk, acc);

    // Sum the column splits in a fixed order, one token tile at a time.
#pragma unroll
    for (int j = 0; j < kTT; ++j) {
      if constexpr (kGated) {
        sum_column_splits_gated<WN, WK, Shape::kThreads>(partial, acc[j], [&](int block_f, int token, float gate, float up) {
          const int f = blockIdx.x * WN * 8 + block_f;
          const int pi = base + j * 8 + token;
          if (f < kRows / 2 && pi < count) P::store_gated(args, pairs[pi], f, gate, up);
        });
      } else {
        sum_column_splits<WN, WK, Shape::kThreads>(partial, acc[j], [&](int block_row, int token, float v) {
          const int row = blockIdx.x * WN * 16 + block_row;
          const int pi = base + j * 8 + token;
          if (row < kRows && pi < count) P::store(args, pairs[pi], row, v);
        });
      }
    }
  }
}

// Passes of 8 pairs up to 8 tokens, else of 16: an expert rarely has more pairs than that at decode
// (64 tokens × top-6 of 64 experts: 6 on average), and narrow passes leave registers for more
// weight loads in flight. A busier expert takes more passes (its rows come from L2 again).
// kSms: the target's SM count (moe_stream_splits); kWK: the column splits, when a caller (the
// benchmark) chooses them.
template <class P, int kExperts, int kTopK, int kSms,
          int kWK = moe_stream_splits(P::kRows, P::kK, kTopK, kExperts, kSms)>
inline void launch_moe_stream(const typename P::Args& args, int tokens, cudaStream_t stream) {
  static_assert(kSms > 0, "moe_stream: the target's SM count (shape sms) must be set");
  constexpr int kRowBlocks = moe_stream_row_blocks(P::kRows, MoeStreamWarps<kWK>::kWN);
  auto launch = [&](auto tt) {
    constexpr int kTT = decltype(tt)::value;
    const dim3 grid(kRowBlocks, min_int(kExperts, tokens * kTopK));
    KILN_LAUNCH((moe_stream_kernel<P, kExperts, kTT, kWK>), grid, MoeStreamWarps<kWK>::kThreads, 0, stream, args);
  };
  if (tokens <= 8) {
    launch(TokenTiles<1>{});
  } else {
    launch(TokenTiles<2>{});
  }
}

}  // namespace kiln::detail
