// Streaming dot products on the tensor cores, for kernels that read each weight row once while a
// few token rows wait in registers: the decode paths of the routed experts (moe_gate_up.cuh,
// moe_down.cuh) and of MLA's W_UV (mla_v_up.cuh). The GEMV (linear.cuh) uses the same lane layout
// with its own pipelined loop.
#pragma once

#include "templates/blocks/mma.cuh"
#include "templates/common.cuh"

namespace kiln::detail {

// =====================================================================================
// Streaming dot products: a warp multiplies 16 weight rows with up to 8·kTT token rows on the
// tensor cores (mma.sync m16n8k16), weights read once with 16-byte streaming loads. Same scheme as
// gemv.cuh: per 32-column step a lane loads 16 bytes of rows g and g + 8 (columns 8q..8q+7) and of
// token g of each n8 tile; those 8 columns stand for its k slots of two k16 steps, the same
// permutation on both sides, so the dot products come out right.
// =====================================================================================

// acc[j] += W[rows g, g + 8] · X[token j·8 + g] over the column steps wk, wk + kWK, ... of a row of
// kK values. acc[j][c] is C of the mma: (row g, token 2q), (row g, 2q + 1), (row g + 8, 2q),
// (row g + 8, 2q + 1) of token tile j.
template <int kK, int kTT, int kWK>
struct Rows16 {
  static constexpr int kVec = vec_width(kK, 2);
  static constexpr int kSteps = ceil_div(kK, 32);
  static constexpr int kUnroll = max_int(1, 4 / kTT);  // column steps per load group

  __device__ static __forceinline__ void dot(const bf16* w0, const bf16* w1, bool ok0, bool ok1,
                                             const bf16* const (&x)[kTT], const bool (&x_ok)[kTT], int wk,
                                             float (&acc)[kTT][4]) {
    constexpr int U = kUnroll;
    const int q = threadIdx.x % 4;
    struct Group {
      uint4 a0[U], a1[U], b[U][kTT];
    };
    auto load_group = [&](int s0, Group& grp) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int step = s0 + u * kWK;
        const int col = step * 32 + q * 8;
        const bool step_ok = step < kSteps;
        grp.a0[u] = load_row_chunk<kK, kVec, RowLoad::streaming>(w0, col, step_ok && ok0);
        grp.a1[u] = load_row_chunk<kK, kVec, RowLoad::streaming>(w1, col, step_ok && ok1);
#pragma unroll
        for (int j = 0; j < kTT; ++j) {
          grp.b[u][j] = load_row_chunk<kK, kVec, RowLoad::after_wait>(x[j], col, step_ok && x_ok[j]);
        }
      }
    };
    auto mma_group = [&](const Group& grp) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int j = 0; j < kTT; ++j) mma_row_chunk(acc[j], grp.a0[u], grp.a1[u], grp.b[u][j]);
      }
    };
    if (wk >= kSteps) return;
    Group current;
    load_group(wk, current);
    // Not unrolled: the next group's loads are issued before the current group's mmas.
#pragma unroll 1
    for (int s0 = wk; s0 < kSteps; s0 += kWK * U) {
      Group next;
      const bool more = s0 + kWK * U < kSteps;
      if (more) load_group(s0 + kWK * U, next);
      mma_group(current);
      if (more) current = next;
    }
  }
};

// Warps of a block: kWN row tiles × kWK column splits, at most 8 warps, each warp taking at least
// 4 of a row's 32-column steps (while kWK > 1). The routed experts' kernel chooses its split
// otherwise (moe_stream_splits, blocks/moe_stream.cuh).
template <int kRows, int kK, int kTT>
struct ExpertStreamShape {
  static constexpr int kSteps = ceil_div(kK, 32);
  static constexpr int kWK = max_int(1, min_int(kTT >= 8 ? 4 : 8, kSteps / 4));
  static constexpr int kWN = max_int(1, 8 / kWK);
  static constexpr int kRowBlocks = ceil_div(ceil_div(kRows, 16), kWN);
  static constexpr int kThreads = kWN * kWK * 32;
};

// The column splits of a block's warps: each warp's C fragment (acc) goes to partial[warp], and
// fragment element c of `lane` in row tile tn is the sum over the tile's kWK splits in warp order
// (deterministic). partial: [kWN · kWK][128] shared floats.
__device__ __forceinline__ void stash_column_split(float (*partial)[128], const float (&acc)[4]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int c = 0; c < 4; ++c) partial[warp][lane * 4 + c] = acc[c];
  __syncthreads();
}
template <int kWK>
__device__ __forceinline__ float column_split_sum(const float (*partial)[128], int tn, int lane, int c) {
  float v = 0.0f;
#pragma unroll
  for (int k = 0; k < kWK; ++k) v += partial[tn * kWK + k][lane * 4 + c];
  return v;
}

// Sums the kWK column splits of the block's kWN row tiles for one token tile (acc: a warp's C
// fragment of the mma) and hands each result to store(row in the block, token in the tile, value).
// Every thread calls it, and it returns with the block synchronized.
template <int kWN, int kWK, int kThreads, typename Store>
__device__ __forceinline__ void sum_column_splits(float (*partial)[128], const float (&acc)[4], Store&& store) {
  stash_column_split(partial, acc);
  for (int i = threadIdx.x; i < kWN * 128; i += kThreads) {
    // i -> (row tile of the block, token in the tile, row in the tile), rows fastest.
    const int tn = i / 128, token = (i / 16) % 8, r = i % 16;
    store(tn * 16 + r, token, column_split_sum<kWK>(partial, tn, (r % 8) * 4 + token / 2, (r / 8) * 2 + token % 2));
  }
  __syncthreads();
}

// As sum_column_splits for a gated warp layout (the routed experts' streaming kernels; linear.cuh's
// tile_row): rows r and r + 8 of a row tile are feature r's gate and up; store(feature in the
// block, token in the tile, gate, up).
template <int kWN, int kWK, int kThreads, typename Store>
__device__ __forceinline__ void sum_column_splits_gated(float (*partial)[128], const float (&acc)[4], Store&& store) {
  stash_column_split(partial, acc);
  for (int i = threadIdx.x; i < kWN * 64; i += kThreads) {
    // i -> (row tile of the block, token in the tile, feature in the tile), features fastest.
    const int tn = i / 64, token = (i / 8) % 8, r = i % 8;
    const int src_lane = r * 4 + token / 2;
    store(tn * 8 + r, token, column_split_sum<kWK>(partial, tn, src_lane, token % 2),
          column_split_sum<kWK>(partial, tn, src_lane, 2 + token % 2));
  }
  __syncthreads();
}

// Two adjacent bf16 outputs (the second only when `two`), one 4-byte store when aligned.
__device__ __forceinline__ void store_bf16_pair(bf16* p, float v0, float v1, bool two) {
  if (two && (reinterpret_cast<unsigned long long>(p) & 3) == 0) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
  } else {
    p[0] = __float2bfloat16_rn(v0);
    if (two) p[1] = __float2bfloat16_rn(v1);
  }
}

// Columns n (even) and n + 1 of a row of kCols bf16 values starting 4-byte aligned: with kCols even
// both are always there and aligned (one store, no check); otherwise store_bf16_pair.
template <int kCols>
__device__ __forceinline__ void store_bf16_columns(bf16* row, int n, float v0, float v1, bool two) {
  if constexpr (kCols % 2 == 0) {
    *reinterpret_cast<__nv_bfloat162*>(row + n) = __floats2bfloat162_rn(v0, v1);
  } else {
    store_bf16_pair(row + n, v0, v1, two);
  }
}

}  // namespace kiln::detail
