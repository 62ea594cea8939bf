// The rows of a prefill attention block, shared by the tensor-core kernels: a block takes rows
// tile·kRows.. of one sequence, a row being (token, query head of its KV head's group), token-major
// (row = token · kGroup + head), and each thread owns rows g and g + 8 of its warp's 16.
#pragma once

#include "templates/common.cuh"

namespace kiln::detail {

// The largest and smallest position among the block's rows that exist: the keys it attends to
// (0..max_pos) and where the causal mask can start (past min_pos). The first kRows / 32 warps read
// a row's position each; `bounds` is 2 · kRows / 32 ints of shared memory. Every thread of the
// block calls it (it holds a barrier).
template <int kRows, int kGroup>
__device__ __forceinline__ void prefill_block_bounds(const int* positions, int q_begin, int rows, int tile,
                                                     int* bounds, int& max_pos, int& min_pos) {
  constexpr int kWarps = kRows / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp < kWarps) {
    const int row = tile * kRows + static_cast<int>(threadIdx.x);
    const bool valid = row < rows;
    const int pos = valid ? positions[q_begin + row / kGroup] : -1;
    const int hi = __reduce_max_sync(0xffffffffu, pos);
    const int lo = __reduce_min_sync(0xffffffffu, valid ? pos : 0x7fffffff);
    if (lane == 0) {
      bounds[warp] = hi;
      bounds[kWarps + warp] = lo;
    }
  }
  __syncthreads();
  max_pos = bounds[0];
  min_pos = bounds[kWarps];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) {
    max_pos = max(max_pos, bounds[w]);
    min_pos = min(min_pos, bounds[kWarps + w]);
  }
}

// The positions of this thread's two rows (first_row and first_row + 8); rows past the end act as
// the block's last position.
template <int kGroup>
__device__ __forceinline__ void prefill_row_positions(const int* positions, int q_begin, int rows, int first_row,
                                                      int max_pos, int (&row_pos)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = first_row + i * 8;
    row_pos[i] = row < rows ? positions[q_begin + row / kGroup] : max_pos;
  }
}

// A block's sequence, KV head and row tile, the tiles counted from the last: the longest (latest)
// start first. Two orders of the rest (`heads_inner`, launch_prefill_rows's choice):
//   heads inner: grid (sequences × KV heads, tiles): each tile of every head before the next tile,
//     close to the longest-first schedule. Where a head has fewer tiles than the GPU has SMs, each
//     head's tiles in a row left the last heads' longest tiles to start near the end.
//   heads outer: grid (tiles, sequences × KV heads): a head's tiles in a row, so that the blocks in
//     flight share the keys and values of one or two heads in L2.
// bench_kernels --prefill-only on an H200, heads outer / inner (bench/RESULTS.md 2026-11-29):
// DeepSeek-V2's expanded 16 heads × 192 / 128 at 2,048 tokens (16 tiles a head) 176 / 259 TFLOP/s,
// at 8,192 (64) 302 / 329; 32 heads over 8 × 128 at 8,192 (256 tiles) 477 / 473 and at 32,768
// (1,024) 479 / 473; at 2,048 (64 tiles) 311 (the eleventh session's) / 349.
struct PrefillTile {
  int seq, kv_head, tile;
};

template <int kKvHeads>
__device__ __forceinline__ PrefillTile prefill_tile(bool heads_inner) {
  const int pair = static_cast<int>(heads_inner ? blockIdx.x : blockIdx.y);
  const int tiles = static_cast<int>(heads_inner ? gridDim.y : gridDim.x);
  const int from_last = static_cast<int>(heads_inner ? blockIdx.y : blockIdx.x);
  return {pair / kKvHeads, pair % kKvHeads, tiles - 1 - from_last};
}

// Heads inner up to this many row tiles a (sequence, KV head): about the SMs of a GPU.
constexpr long long kHeadsInnerTiles = 128;

// The launch of a tensor-core prefill kernel (kKernel, of Shape): one block per Shape::kBlockM rows
// of a sequence and KV head, in prefill_tile's order (a grid's y counts up to 65,535: heads inner
// only with few tiles; heads outer puts the sequences × KV heads there). `extra`: the kernel's
// arguments after heads_inner, if it has more.
template <auto kKernel, class Shape, int kKvHeads, class Kv, class... Extra>
void launch_prefill_rows(const bf16* q_rows, const Kv& kv, bf16* out, const int* query_start, const int* positions,
                         int num_seqs, int max_query_len, float scale, cudaStream_t stream, Extra... extra) {
  allow_dynamic_smem_once<kKernel, Shape::kSmemBytes>();
  const long long rows = static_cast<long long>(max_query_len) * Shape::kGroup;
  const auto tiles = static_cast<unsigned>(ceil_div_ll(rows, Shape::kBlockM));
  const auto pairs = static_cast<unsigned>(num_seqs * kKvHeads);
  const bool heads_inner = tiles <= kHeadsInnerTiles;
  const dim3 grid = heads_inner ? dim3(pairs, tiles) : dim3(tiles, pairs);
  KILN_LAUNCH(kKernel, grid, Shape::kThreads, Shape::kSmemBytes, stream, q_rows, kv, out, query_start, positions,
              scale * kLog2e, heads_inner, extra...);
}

}  // namespace kiln::detail
