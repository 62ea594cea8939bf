// How the decode GEMV (linear.cuh) splits a projection weight[n, k] over warps and blocks, from the
// shape alone. Shared by the kernel and by kilnc, which sizes the decode scratch that the wide
// plan's partial sums use. Plain C++ (no system includes), so that NVRTC, nvcc and the host
// compiler all read it.
//
// Every output is the same float sum whatever the token count (batch invariance): warp split wk of
// a row tile sums the column steps (32 columns each) wk, wk + warps_k, wk + 2·warps_k, ... in that
// order, and the warps_k splits are added in split order. (Each split a contiguous range of steps
// instead was measured on an H200: Llama-3.1-8B's gate_up and down 5-7% slower at one token, its
// batched GEMVs 7-25% slower at 64; bench/RESULTS.md 2026-12-01.) Two plans arrange those same sums:
//  - narrow (few tokens): a block holds all warps_k splits of warps_n row tiles and adds them in
//    shared memory;
//  - wide (many tokens, shapes where it pays: `wide` below): a block holds wide_warps_n row tiles — so that the warps reading the same
//    token columns share them in L1 instead of every 16 rows fetching the whole input from L2 — and
//    wide_warps_k of the splits; the warps_k / wide_warps_k groups of splits run in different blocks,
//    write their partial sums to scratch, and a second kernel adds them in split order.
#pragma once

#include "templates/host_device.hpp"

namespace kiln {

// The streaming kernels (GEMV, routed experts, MLA v_up at decode) read the weights once per pass
// of up to this many token rows (blocks/mma.cuh's kStreamPassTokens).
constexpr int kGemvPassTokens = 64;

struct GemvPlan {
  int steps;      // 32-column steps along a row
  int row_tiles;  // 16-row tiles
  int warps_k;    // column splits of a row tile (the sum order above)
  // narrow
  int warps_n;    // row tiles per block
  int blocks;
  // wide
  int wide_warps_n;     // row tiles per block
  int wide_warps_k;     // column splits per block
  int wide_groups;      // blocks along the columns: warps_k / wide_warps_k
  int wide_row_blocks;  // blocks along the rows
  // Whether passes of many tokens take the wide plan: when the narrow plan leaves SMs without a
  // block (it then splits the columns 16 ways and each block streams the whole input for 16 rows),
  // or when the wide plan needs no partial sums. Measured on an H100 at 64 tokens
  // (bench/RESULTS.md, 2026-11-24): 1.4-2.1× faster in those cases, 10-25% slower for shapes
  // whose narrow plan already has a block per SM and 8 or 4 splits (the partials' round trip
  // costs more than the input reads it saves).
  bool wide;
};

// sms: the target's SM count; it sizes the split, any GPU runs it.
KILN_HOST_DEVICE constexpr GemvPlan gemv_plan(int n, int k, int sms) {
  GemvPlan p{};
  p.steps = (k + 31) / 32;
  p.row_tiles = (n + 15) / 16;
  // More row tiles per block when there are rows to spare (the warps then share the inputs in L1).
  p.warps_n = p.row_tiles >= 16 * sms ? 8 : p.row_tiles >= 8 * sms ? 4 : p.row_tiles >= 4 * sms ? 2 : 1;
  p.blocks = (p.row_tiles + p.warps_n - 1) / p.warps_n;
  // Split the columns over more warps when the rows alone leave SMs idle.
  const int warps_k_max = (p.blocks >= sms ? 8 : 16) / p.warps_n;
  p.warps_k = warps_k_max < p.steps ? warps_k_max : p.steps;
  if (p.warps_k < 1) p.warps_k = 1;
  // Wide: 16 warps a block, two splits each when they pair up, the rest of the warps on row tiles.
  p.wide_warps_k = p.warps_k % 2 == 0 ? 2 : 1;
  p.wide_groups = p.warps_k / p.wide_warps_k;
  p.wide_warps_n = 16 / p.wide_warps_k < p.row_tiles ? 16 / p.wide_warps_k : p.row_tiles;
  p.wide_row_blocks = (p.row_tiles + p.wide_warps_n - 1) / p.wide_warps_n;
  p.wide = p.blocks < sms || (p.wide_groups == 1 && p.wide_warps_n > p.warps_n);
  return p;
}

// Decode scratch floats the wide plan's partial sums take for steps of up to max_batch tokens (one
// pass at a time; 0 when a block holds every split).
KILN_HOST_DEVICE constexpr long long gemv_scratch_floats(int n, int k, int sms, int max_batch) {
  const GemvPlan p = gemv_plan(n, k, sms);
  const int tokens = max_batch < kGemvPassTokens ? max_batch : kGemvPassTokens;
  return p.wide && p.wide_groups > 1 ? static_cast<long long>(p.warps_k) * tokens * n : 0;
}

}  // namespace kiln
