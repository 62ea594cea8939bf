// The batched decode GEMV's block geometry (gemv_batched.cuh), from the shape alone: row tiles a
// warp, warps a block and, for the wide form, column splits a block. Plain C++ (no system
// includes), so that NVRTC, nvcc and the host compiler all read it, and a CPU test checks what the
// models' shapes get (tests/codegen/test_gemv_geometry.cpp).
//
// Both forms choose the same way: of a few candidate geometries, the one whose busiest SM streams
// the least, then the one with more warps an SM; the forms differ in their candidates and their
// last tie-breaks. Every candidate of a pass computes the same bits (the sum order is the plan's,
// gemv_plan.hpp): the geometry decides only the speed.
#pragma once

#include "templates/host_device.hpp"

namespace kiln {

namespace detail {

// A candidate's share of the busiest SM: `blocks` blocks of `warps` warps spread evenly over `sms`
// SMs, all resident at once where they fit (16 warps an SM: 128 registers a thread, so two blocks
// of 8 warps or fewer, one of more).
struct SmShare {
  int per_sm;       // blocks on the busiest SM
  int resident;     // of those, at once
  long long warps;  // warps the busiest SM holds at once
};

KILN_HOST_DEVICE constexpr SmShare sm_share(int blocks, int warps, int sms) {
  const int per_sm = (blocks + sms - 1) / sms;
  const int most = warps <= 8 ? 2 : 1;
  const int resident = per_sm < most ? per_sm : most;
  return {per_sm, resident, static_cast<long long>(resident) * warps};
}

// A candidate's place in a chooser's order: smaller first, element by element.
template <int N>
struct OrderKey {
  long long v[N];
  KILN_HOST_DEVICE constexpr bool operator<(const OrderKey& o) const {
    for (int i = 0; i < N; ++i) {
      if (v[i] != o.v[i]) return v[i] < o.v[i];
    }
    return false;
  }
};

// A block's geometry: row tiles a warp (1 or 2) and warps a block (each holding one row group's
// split; all kWarpsK splits of a row group in the block).
struct BatchedGemvBlock {
  int tiles_per_warp;
  int warps;
};

// A narrow geometry as chosen, with its share of the busiest SM.
struct BatchedGemvChoice {
  BatchedGemvBlock block;
  SmShare share;
};

// The best of `candidates` by the order below (block {0, 0}: none holds whole splits).
template <int N>
KILN_HOST_DEVICE constexpr BatchedGemvChoice best_batched_gemv_block(const BatchedGemvBlock (&candidates)[N],
                                                                     int row_tiles, int warps_k, int sms) {
  BatchedGemvChoice best{{0, 0}, {0, 0, 0}};
  OrderKey<3> best_key{};
  for (const BatchedGemvBlock c : candidates) {
    if (c.warps % warps_k != 0) continue;  // row groups of whole splits (use_batched_gemv: warps_k <= 8)
    const int tiles = c.warps / warps_k * c.tiles_per_warp;
    const SmShare share = sm_share((row_tiles + tiles - 1) / tiles, c.warps, sms);
    const OrderKey<3> key{{static_cast<long long>(share.per_sm) * tiles, -share.warps, -c.tiles_per_warp}};
    if (best.block.warps == 0 || key < best_key) best = {c, share}, best_key = key;
  }
  return best;
}

// The geometry whose busiest SM streams the fewest row tiles (blocks spread evenly, all resident at
// once), then the one with more warps an SM, then two tiles a warp (each input read serves 32
// rows). Measured at 64 tokens on an H200 (bench_kernels --batched, 2026-11-29 nineteenth session):
// Llama-3.1-8B's o_proj (256 tiles) 22.0 µs at 1 × 16 warps (2 tiles a block, a block an SM)
// against 33.1 at 2 × 16 (4 tiles a block, half the SMs idle); its qkv (384 tiles) 27.8 at 1 × 24
// (3 tiles a block, 128 blocks: 3 an SM) against 34.0 at 2 × 16 (96 blocks) and 39.2 at 1 × 16
// (192 blocks: two waves). {0, 0} where no candidate holds whole splits (a split count such as 5
// or 7, which divides none of their warp counts).
// Where that geometry's blocks come in waves (the LM heads), 8-warp blocks instead, two an SM, so
// that one block's start and end overlap the other's streaming. H100, 64 / 32 tokens, µs a launch
// chained (bench/RESULTS.md 2026-12-07 sixty-fifth session): Qwen3-0.6B's LM head 151936 × 1024
// 147.99 / 121.18 at 1 × 24 (three waves) against 132.18 / 113.50 at 1 × 8, Llama-3.2-1B's 128256 ×
// 2048 204.67 / 186.57 at 2 × 16 (two waves) against 197.71 / 183.69 at 2 × 8. The decode step
// (H100, sixty-sixth session): Qwen3-0.6B batch 64 1.4370 -> 1.4228 ms, batch 32 -1.0%, batch 16
// +0.3%; Llama-3.2-1B batch 64 -0.7%; Llama-3.1-8B unchanged.
KILN_HOST_DEVICE constexpr BatchedGemvBlock batched_gemv_block(int row_tiles, int warps_k, int sms) {
  constexpr BatchedGemvBlock kCandidates[] = {{2, 16}, {1, 16}, {1, 24}, {2, 8}};
  constexpr BatchedGemvBlock kTwoAnSm[] = {{2, 8}, {1, 8}};
  const BatchedGemvChoice best = best_batched_gemv_block(kCandidates, row_tiles, warps_k, sms);
  // None, or the busiest SM holds all its blocks at once: the order's choice.
  if (best.block.warps == 0 || best.share.per_sm <= best.share.resident) return best.block;
  const BatchedGemvBlock two = best_batched_gemv_block(kTwoAnSm, row_tiles, warps_k, sms).block;
  return two.warps != 0 ? two : best.block;  // (3 splits: whole row groups in 24 warps only)
}

// The wide form's geometry: row tiles a warp, warps a block and splits a block (block_warps_k, at
// most half the plan's, so that a block's token rows serve many row tiles). Two splits a block or
// more where the splits pair up: a split's column step is 64 bytes of a row, half a 128-byte line,
// and a block holding one split left the line's other half to a block of another group, which runs
// at another time (the likely reason; not traced). Chosen as above (the busiest SM's tile-splits,
// then the most warps an SM), ties going to more blocks an SM, then to fewer splits a block (the
// token rows a block copies serve more row tiles), then to fewer row blocks and to two tiles a
// warp. H100, 64 / 32 / 16 tokens, µs a launch chained (graph_us; bench/RESULTS.md 2026-12-07
// sixty-fifth session), one split a block -> this: Qwen3-0.6B's o_proj 5.53 / 3.71 / 2.92 -> 4.09
// / 3.19 / 2.71 (4 warps, 2 tiles a block, 256 blocks), Llama-3.2-1B's down_proj 18.63 / 18.77 /
// 16.46 -> 15.45 / 13.81 / 14.15 (8 warps, 4 tiles, 256 blocks).
struct BatchedGemvWideBlock {
  int tiles_per_warp;
  int warps;
  int block_warps_k;
};

KILN_HOST_DEVICE constexpr BatchedGemvWideBlock batched_gemv_wide_block(int row_tiles, int warps_k, int sms) {
  constexpr BatchedGemvWideBlock kCandidates[] = {{1, 16, 2}, {1, 8, 2}, {1, 4, 2}, {2, 8, 2}, {1, 16, 4},
                                                   {1, 8, 4},  {1, 16, 1}, {1, 8, 1}, {2, 8, 1}, {2, 16, 1}};
  BatchedGemvWideBlock best{0, 0, 0};
  OrderKey<7> best_key{};
  for (const BatchedGemvWideBlock c : kCandidates) {
    if (c.warps % c.block_warps_k != 0 || warps_k % c.block_warps_k != 0 || warps_k / c.block_warps_k < 2) continue;
    const int tiles = c.warps / c.block_warps_k * c.tiles_per_warp;
    const int row_blocks = (row_tiles + tiles - 1) / tiles;
    const SmShare share = sm_share(row_blocks * (warps_k / c.block_warps_k), c.warps, sms);
    // One split a block only where the splits do not pair up.
    const OrderKey<7> key{{c.block_warps_k == 1, static_cast<long long>(share.per_sm) * tiles * c.block_warps_k,
                           -share.warps, -share.resident, c.block_warps_k, row_blocks, -c.tiles_per_warp}};
    if (best.warps == 0 || key < best_key) best = c, best_key = key;
  }
  return best;
}

}  // namespace detail

}  // namespace kiln
