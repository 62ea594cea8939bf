// The decode GEMV for a batch (passes of 9 to 64 tokens): the same sums as linear.cuh's narrow
// plan, bit for bit, arranged so that the weights stream at a batch's token count. linear.cuh
// includes it after the definitions it uses (LinearOutType, store_linear_out).
//
// Why: at 64 tokens a warp of the plain GEMV reads 4 KB of inputs per 1 KB of weights (16 rows ×
// 32 columns against 64 tokens × 32 columns), each warp of a block at columns of its own, so the
// inputs came from L2 once per 16 rows and outran the weights; and with 32 accumulators and a
// group of inputs in flight a thread's registers left room for few warps, so little weight data was
// in flight (bench/RESULTS.md, 2026-11-24: projections at 1.1-1.7 TB/s at batch 64).
//
// Here a block runs in rounds, one column step of every warp a round, and copies each round's
// weights and token rows into shared memory with cp.async, kStages rounds in flight (no registers
// held for them): the weights each lane's own chunks, read back by that lane; the token rows once
// for every row tile of the block, a round trip for all of them. A warp owns one or two row tiles
// of one column split (two: each input it reads serves 32 rows); how many, and how many warps a
// block, is chosen from the shape so that the SMs get even shares (batched_gemv_block).
//
// Shapes with fewer row tiles than SMs (the wide plan's: Llama-3.2-1B's and Qwen3-0.6B's o_proj and
// down_proj, 16 splits a tile) take the wide form: a block holds a group of the splits of many row
// tiles (kBlockWarpsK of them; the groups in blocks side by side, blockIdx.y), so that every SM has a
// block and the token rows a block copies serve all its tiles; each split's sums go to the plan's
// scratch and gemv_sum_splits_kernel adds them, as the wide plan's kernel does. Before it those
// shapes ran the wide plan's register-pipelined kernel at 1.2 TB/s at 64 tokens (1B down_proj 27.5
// µs, bench/RESULTS.md 2026-11-29).
//
// Bits: the warp for (row tile, split wk) sums the column steps wk, wk + kWarpsK, ... in order with
// the same mma (mma_row_chunk: the same lane layout and k permutation), and the splits are added in
// split order from 0.0f, as sum_column_splits does: the plan's split depends on the shape only.
#pragma once

#include "templates/blocks/mma.cuh"
#include "templates/common.cuh"
#include "templates/gemv_batched_geometry.hpp"
#include "templates/gemv_plan.hpp"

namespace kiln {

namespace detail {

// kWide: the wide form (a group of splits a block, the sums through scratch); its geometry is
// batched_gemv_wide_block's unless the Set parameters give it (kBlockWarpsKSet: splits a block).
template <int kN, int kK, int kSMs, int kTokenTiles, int kTilesPerWarpSet = 0, int kBlockWarps = 0, int kStagesSet = 0,
          bool kWideSet = false, int kBlockWarpsKSet = 0>
struct BatchedGemvShape {
  static constexpr GemvPlan kPlan = gemv_plan(kN, kK, kSMs);
  static constexpr int kSteps = kPlan.steps;
  static constexpr int kRowTiles = kPlan.row_tiles;
  static constexpr int kWarpsK = kPlan.warps_k;  // the sum order's split
  static constexpr bool kWide = kWideSet;
  static constexpr BatchedGemvBlock kBlock = batched_gemv_block(kRowTiles, kWarpsK, kSMs);
  static constexpr BatchedGemvWideBlock kWideBlock = batched_gemv_wide_block(kRowTiles, kWarpsK, kSMs);
  static constexpr int kTilesPerWarp = kTilesPerWarpSet > 0 ? kTilesPerWarpSet
                                       : kWide                ? kWideBlock.tiles_per_warp
                                                              : kBlock.tiles_per_warp;
  // Splits a block: all of them, or (wide) a group; the groups' blocks side by side (blockIdx.y).
  static constexpr int kBlockWarpsK = !kWide ? kWarpsK : kBlockWarpsKSet > 0 ? kBlockWarpsKSet : kWideBlock.block_warps_k;
  static constexpr int kGroups = kWarpsK / kBlockWarpsK;
  // Warps a block: the block's splits of kWarpsN row groups.
  static constexpr int kWarpsN =
      max_int(1, (kBlockWarps > 0 ? kBlockWarps : kWide ? kWideBlock.warps : kBlock.warps) / kBlockWarpsK);
  static constexpr int kWarps = kWarpsN * kBlockWarpsK;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockTiles = kWarpsN * kTilesPerWarp;
  static constexpr int kRowBlocks = ceil_div(kRowTiles, kBlockTiles);
  // A stage is one round: one column step of every warp (kBlockWarpsK steps), its weights (each
  // lane's 16-byte chunks where the lane reads them back) and the token rows at those columns.
  static constexpr int kRounds = ceil_div(kSteps, kWarpsK);
  static constexpr int kTokenTileCount = kTokenTiles;
  static constexpr int kTokens = kTokenTiles * 8;
  static constexpr int kWarpWeightBytes = kTilesPerWarp * 2 * 32 * 16;  // [tile][row g | g + 8][lane]
  static constexpr int kWeightBytes = kWarps * kWarpWeightBytes;
  // A token's row of a stage, padded so that its length is an odd multiple of 64 bytes: lanes g
  // and g + 1 (two tokens) of a quarter warp then read the two halves of the banks.
  static constexpr int kRowBytes = kBlockWarpsK * 64 + ((kBlockWarpsK * 64) % 128 == 0 ? 64 : 0);
  static constexpr int kStageBytes = kWeightBytes + kTokens * kRowBytes;
  // Blocks an SM holds (16 warps an SM: 128 registers a thread), and stages in flight: as many as
  // fit in their share of its 227 KB of shared memory, at most 6.
  static constexpr int kBlocksPerSm = kWarps <= 8 ? 2 : 1;
  static constexpr int kStages =
      kStagesSet > 0 ? kStagesSet : max_int(2, min_int(6, 220 * 1024 / kBlocksPerSm / kStageBytes));
  // The splits' sums of kEpilogueTiles token tiles at once, in the stages' space (one token tile
  // where not even two fit): the fewer the passes, the fewer the barriers.
  // (The wide form stores each split's sums from registers.)
  static constexpr int kTilePartialBytes = kBlockTiles * kWarpsK * 128 * 4;
  static constexpr int kEpilogueTiles = max_int(1, min_int(kTokenTiles, kStages * kStageBytes / kTilePartialBytes));
  static constexpr int kPartialBytes = kWide ? 0 : kEpilogueTiles * kTilePartialBytes;
  static constexpr int kSmemBytes = max_int(kStages * kStageBytes, kPartialBytes);
  static_assert(kWarpsK <= 16 && kWarps % kBlockWarpsK == 0 && kWarpsK % kBlockWarpsK == 0,
                "batched GEMV: row groups of at most 16 splits, in whole groups");
  static_assert(!kWide || kGroups > 1, "batched GEMV: the wide form splits the splits over blocks");
  static_assert(kK % 8 == 0, "batched GEMV: rows of whole 16-byte chunks");
};

// Whether a pass of kTokenTiles token tiles takes the batched GEMV: two tiles or more, rows of
// 16-byte chunks, and a narrow plan with a block for every SM (shapes with fewer row tiles keep
// the wide plan, whose blocks split the columns).
template <int kN, int kK, int kSMs, int kTokenTiles>
constexpr bool use_batched_gemv() {
  constexpr GemvPlan p = gemv_plan(kN, kK, kSMs);
  return kTokenTiles >= 2 && kK % 8 == 0 && p.blocks >= kSMs && p.warps_k <= 8;
}

// Whether such a pass takes the wide form instead: shapes with fewer row tiles than SMs whose
// plan's scratch holds each split's sums (gemv_scratch_floats) and splits at least 4 ways.
template <int kN, int kK, int kSMs, int kTokenTiles>
constexpr bool use_batched_gemv_wide() {
  constexpr GemvPlan p = gemv_plan(kN, kK, kSMs);
  return kTokenTiles >= 2 && kK % 8 == 0 && p.blocks < kSMs && p.warps_k >= 4 && gemv_scratch_floats(kN, kK, kSMs, 64) > 0;
}

// kPairs (the narrow form only): the rows in gate | up pairs (linear.cuh's tile_row), and `out` the
// [tokens, kN / 2] rows of silu(gate) · up (linear_act.cuh).
template <int kN, int kK, LinearOut kOut, typename Shape, bool kPairs = false>
__global__ void __launch_bounds__(Shape::kThreads, Shape::kBlocksPerSm)
    gemv_batched_kernel(const bf16* __restrict__ in, const bf16* __restrict__ weight,
                        typename LinearOutType<kOut>::type* __restrict__ out, float* __restrict__ partials,
                        int tokens) {
  static_assert(!kPairs || (!Shape::kWide && kOut == LinearOut::store_bf16 && kN % 2 == 0),
                "batched GEMV: SwiGLU's paired rows need the narrow form and bf16 gate | up rows");
  constexpr int T = Shape::kTokenTileCount, WK = Shape::kWarpsK, WKB = Shape::kBlockWarpsK, TW = Shape::kTilesPerWarp;
  constexpr int R = Shape::kRounds, S = Shape::kStages;
  extern __shared__ uint4 smem_u4[];
  char* smem = reinterpret_cast<char*>(smem_u4);

  // wk: the warp's split of the plan (the sum order); its place in the block's group, wk_in.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wn = warp / WKB, wk_in = warp % WKB, wk = blockIdx.y * WKB + wk_in;
  const int g = lane / 4, q = lane % 4;
  const int first_tile = blockIdx.x * Shape::kBlockTiles + wn * TW;

  // Rows g and g + 8 of each of the warp's row tiles (tile_row). A tile past the matrix (the last
  // block's) reads tile 0's rows and is never stored; where kN is not whole tiles, rows past it
  // read zeros.
  const bf16* w[TW][2];
  bool w_ok[TW][2];
#pragma unroll
  for (int t = 0; t < TW; ++t) {
    const int tile = first_tile + t < Shape::kRowTiles ? first_tile + t : 0;
    constexpr bool kWhole = !kPairs && kN % 16 == 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      w_ok[t][h] = kWhole || tile_row_in<kN, kPairs>(tile, g + 8 * h);
      w[t][h] = weight + static_cast<long long>(w_ok[t][h] ? tile_row<kN, kPairs>(tile, g + 8 * h) : 0) * kK;
    }
  }
  // Round r's weights: this lane's chunks of its rows at the warp's step r·WK + wk; nothing past
  // its last step (the warp skips that round). Past kK (rows not whole steps): zeros.
  const int lane_col = wk * 32 + q * 8;  // in a round's columns of the matrix; of the stage's: wk_in
  const int stage_col = wk_in * 32 + q * 8;
  auto copy_weights = [&](int r, char* stage) {
    if (r * WK + wk < Shape::kSteps) {
      char* dst = stage + warp * Shape::kWarpWeightBytes + lane * 16;
      const int col = r * WK * 32 + lane_col;
      const bool in_row = kK % 32 == 0 || col < kK;
      const int at = kK % 32 == 0 ? col : min(col, kK - 8);
#pragma unroll
      for (int t = 0; t < TW; ++t) {
        cp_async_16_streaming(dst + (t * 2) * 512, w[t][0] + at, in_row && w_ok[t][0]);
        cp_async_16_streaming(dst + (t * 2 + 1) * 512, w[t][1] + at, in_row && w_ok[t][1]);
      }
    }
  };
  // Round r's token rows: the block's columns [r·WK·32 + blockIdx.y·WKB·32, ... + WKB·32), zeros
  // past `tokens` (those columns of the mma are never stored) and past kK. A thread's chunks are
  // the same every round but for the column: their offsets are worked out once.
  constexpr int kChunks = WKB * 4;  // 16-byte chunks of a token's row in a stage
  constexpr int kCopies = Shape::kTokens * kChunks;
  constexpr int kPerThread = ceil_div(kCopies, Shape::kThreads);
  // dst_off -1: no chunk (the last threads, where the copies do not divide evenly); src_off -1: a
  // token past `tokens` (zeros).
  int src_off[kPerThread], dst_off[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int i = threadIdx.x + k * Shape::kThreads;
    const int t = i / kChunks, c = i % kChunks;
    dst_off[k] = i < kCopies ? Shape::kWeightBytes + t * Shape::kRowBytes + c * 16 : -1;
    src_off[k] = t < tokens ? t * kK + c * 8 : -1;
  }
  auto copy_inputs = [&](int r, char* stage) {
    const int col0 = (r * WK + blockIdx.y * WKB) * 32;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      if (kCopies % Shape::kThreads != 0 && dst_off[k] < 0) continue;
      const bool whole = kK % (WK * 32) == 0 || col0 + WKB * 32 <= kK;  // no column of the round past kK
      const int c8 = (dst_off[k] - Shape::kWeightBytes) % Shape::kRowBytes / 2;
      const bool valid = src_off[k] >= 0 && (whole || col0 + c8 < kK);
      cp_async_16(stage + dst_off[k], valid ? in + (src_off[k] + col0) : in, valid);
    }
  };

  float acc[TW][T][4];
#pragma unroll
  for (int t = 0; t < TW; ++t)
#pragma unroll
    for (int j = 0; j < T; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[t][j][c] = 0.0f;

  // The first S - 1 rounds' weights are requested before the wait (no kernel writes weights), their
  // inputs after it; a round's copies are one commit group after that (S - 2 newer ones pending).
#pragma unroll
  for (int r = 0; r < S - 1; ++r) {
    if (r < R) copy_weights(r, smem + r * Shape::kStageBytes);
    cp_async_commit();
  }
  pdl_release_and_wait();
#pragma unroll
  for (int r = 0; r < S - 1; ++r) {
    if (r < R) copy_inputs(r, smem + r * Shape::kStageBytes);
    cp_async_commit();
  }

  char* stage = smem;                                    // round r's
  char* refill = smem + (S - 1) * Shape::kStageBytes;    // round r + S - 1's: the stage of round r - 1
  char* const last = smem + (S - 1) * Shape::kStageBytes;
#pragma unroll 1
  for (int r = 0; r < R; ++r) {
    cp_async_wait<S - 2>();
    __syncthreads();  // round r is in for every thread; every warp is done with round r - 1's stage
    if (r + S - 1 < R) {
      copy_weights(r + S - 1, refill);
      copy_inputs(r + S - 1, refill);
    }
    cp_async_commit();
    const char* here = stage;
    refill = stage;
    stage = stage == last ? smem : stage + Shape::kStageBytes;
    if (r * WK + wk >= Shape::kSteps) continue;  // the last round: past this warp's steps
    const char* mine = here + warp * Shape::kWarpWeightBytes + lane * 16;
    uint4 a[TW][2];
#pragma unroll
    for (int t = 0; t < TW; ++t) {
      a[t][0] = *reinterpret_cast<const uint4*>(mine + (t * 2) * 512);
      a[t][1] = *reinterpret_cast<const uint4*>(mine + (t * 2 + 1) * 512);
    }
    const char* x = here + Shape::kWeightBytes + g * Shape::kRowBytes + stage_col * 2;
#pragma unroll
    for (int j = 0; j < T; ++j) {
      const uint4 b = *reinterpret_cast<const uint4*>(x + j * 8 * Shape::kRowBytes);
#pragma unroll
      for (int t = 0; t < TW; ++t) mma_row_chunk(acc[t][j], a[t][0], a[t][1], b);
    }
  }
  cp_async_wait<0>();
  if constexpr (Shape::kWide) {
    // Each split's sums into partials [kWarpsK][tokens][kN] for gemv_sum_splits_kernel. Lane (g,
    // q)'s c-th value is row g + 8·(c / 2), token 2q + c % 2 of the tile (mma.cuh's C); a tile past
    // the matrix has rows past kN.
#pragma unroll
    for (int t = 0; t < TW; ++t)
#pragma unroll
      for (int j = 0; j < T; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int n = (first_tile + t) * 16 + g + 8 * (c / 2), tok = j * 8 + 2 * q + c % 2;
          if (n < kN && tok < tokens) partials[(static_cast<long long>(wk) * tokens + tok) * kN + n] = acc[t][j][c];
        }
    return;
  }
  __syncthreads();  // the stages' space becomes the splits' sums

  // kEpilogueTiles token tiles a pass: every warp's sums into shared memory, then each output the
  // sum of its splits in split order (sum_column_splits' order).
  constexpr int J = Shape::kEpilogueTiles, BT = Shape::kBlockTiles;
  // [(token tile jj · BT + block tile) · WK + wk][lane · 4 + c]
  float(*partial)[128] = reinterpret_cast<float(*)[128]>(smem);
#pragma unroll
  for (int j0 = 0; j0 < T; j0 += J) {
#pragma unroll
    for (int jj = 0; jj < J; ++jj) {
      if (j0 + jj < T) {
#pragma unroll
        for (int t = 0; t < TW; ++t)
#pragma unroll
          for (int c = 0; c < 4; ++c) partial[(jj * BT + wn * TW + t) * WK + wk][lane * 4 + c] = acc[t][j0 + jj][c];
      }
    }
    __syncthreads();
    // Fragment element c of `lane` in (token tile jj, block tile bt), its splits summed in order.
    auto split_sum = [&](int jj, int bt, int lane, int c) {
      float v = 0.0f;
#pragma unroll
      for (int k = 0; k < WK; ++k) v += partial[(jj * BT + bt) * WK + k][lane * 4 + c];
      return v;
    };
    if constexpr (kPairs) {
      for (int i = threadIdx.x; i < J * BT * 64; i += Shape::kThreads) {
        const int jj = i / (BT * 64), bt = i / 64 % BT, token = (i / 8) % 8, r = i % 8;
        const int src_lane = r * 4 + token / 2;
        const float gate = split_sum(jj, bt, src_lane, token % 2), up = split_sum(jj, bt, src_lane, 2 + token % 2);
        const int f = (blockIdx.x * BT + bt) * 8 + r, tok = (j0 + jj) * 8 + token;
        if (f < kN / 2 && tok < tokens) {
          out[static_cast<long long>(tok) * (kN / 2) + f] = __float2bfloat16_rn(silu_mul_of_sums(gate, up));
        }
      }
    } else {
      for (int i = threadIdx.x; i < J * BT * 128; i += Shape::kThreads) {
        const int jj = i / (BT * 128), bt = i / 128 % BT, token = (i / 16) % 8, r = i % 16;
        const int src_lane = (r % 8) * 4 + token / 2, src_c = (r / 8) * 2 + token % 2;
        const float v = split_sum(jj, bt, src_lane, src_c);
        const int n = (blockIdx.x * BT + bt) * 16 + r, tok = (j0 + jj) * 8 + token;
        if (n < kN && tok < tokens) store_linear_out<kOut>(out + static_cast<long long>(tok) * kN + n, v);
      }
    }
    __syncthreads();
  }
}

// One pass of at most 8 · kTokenTiles tokens. partials: the wide form's (gemv_scratch_floats),
// unused by the other; add_splits: false leaves the wide form's sums there (PendingSums).
// kPairs: gemv_batched_kernel's.
template <int kN, int kK, LinearOut kOut, int kSMs, int kTokenTiles, typename Shape = BatchedGemvShape<kN, kK, kSMs, kTokenTiles>,
          bool kPairs = false>
inline void launch_gemv_batched(const bf16* in, const bf16* weight, typename LinearOutType<kOut>::type* out,
                                float* partials, int tokens, cudaStream_t stream, bool add_splits = true) {
  constexpr auto kernel = gemv_batched_kernel<kN, kK, kOut, Shape, kPairs>;
  allow_dynamic_smem_once<kernel, Shape::kSmemBytes>();
  KILN_LAUNCH(kernel, dim3(Shape::kRowBlocks, Shape::kGroups), Shape::kThreads, Shape::kSmemBytes, stream, in, weight,
              out, partials, tokens);
  if (!add_splits) return;
  if constexpr (Shape::kWide) launch_gemv_sum_splits<kN, Shape::kWarpsK, kOut>(partials, out, tokens, stream);
}

}  // namespace detail

}  // namespace kiln
