// The routed experts' buckets: moe_gate_up sorts each step's (token, slot) pairs by expert into
// its int scratch, and moe_down reads them back.
//
// Scratch: [0, kExperts] bucket offsets, then the T·kTopK pair indices (t·kTopK + j) sorted by
// expert (stable: a bucket's pairs stay ascending): kExperts + 1 + T·kTopK ints. A step's scratch
// is T · moe_scratch_ints_per_token ints (kTopK + kExperts + 1 a token): the many-block bucketing
// keeps its counts in the tail past the pairs.
#pragma once

#include "templates/blocks/mma.cuh"
#include "templates/blocks/tile_gemm.cuh"
#include "templates/blocks/tile_gemm_wgmma.cuh"
#include "templates/common.cuh"

namespace kiln {

// Scratch ints per token a moe_gate_up / moe_down step needs for step sizes of at least one token:
// the pairs, plus the offsets spread over at least one token. The generator's kMoeScratchPerToken
// is checked against it (kernels.cu).
template <auto S>
constexpr int moe_scratch_ints_per_token() {
  return S.top_k + S.experts + 1;
}

namespace detail {

// Up to one streaming pass of tokens the expert kernels stream (decode); above, the grouped GEMM
// (prefill).
constexpr int kMoeStreamTokens = kStreamPassTokens;

// =====================================================================================
// Groups of rows laid out by bucket offsets (the MoE buckets): tile `index` of the tiles of
// `tile_rows` rows over all groups in order. Called by whole warps; every lane gets the answer.
// =====================================================================================

// The pairs (token · kTopK + j) routed to expert e, ascending: its bucket of the scratch that
// moe_bucket_kernel fills.
template <int kExperts>
__device__ __forceinline__ const int* expert_pairs(const int* scratch, int e) {
  return scratch + kExperts + 1 + scratch[e];
}

struct GroupTile {
  int group;  // -1: past the last tile
  int first;  // first row of the tile inside the group
  int rows;   // rows of the group
};

template <int kGroups>
__device__ __forceinline__ GroupTile locate_group_tile(const int* __restrict__ offsets, int index, int tile_rows) {
  const int lane = threadIdx.x % 32;
  int before = 0;  // tiles of the groups already passed
  for (int base = 0; base < kGroups; base += 32) {
    const int gi = base + lane;
    const int n = gi < kGroups ? offsets[gi + 1] - offsets[gi] : 0;
    const int tiles = n > 0 ? (n - 1) / tile_rows + 1 : 0;
    const int incl = warp_inclusive_sum(tiles);
    const int total = __shfl_sync(0xffffffffu, incl, 31);
    if (index < before + total) {
      const int excl = incl - tiles;
      const bool mine = index >= before + excl && index < before + incl;
      const int src = __ffs(__ballot_sync(0xffffffffu, mine)) - 1;
      const int sel_excl = __shfl_sync(0xffffffffu, excl, src);
      const int sel_n = __shfl_sync(0xffffffffu, n, src);
      return {base + src, (index - before - sel_excl) * tile_rows, sel_n};
    }
    before += total;
  }
  return {-1, 0, 0};
}

// =====================================================================================
// Bucketing: one block of 32 warps. Warp w owns a contiguous segment of the pairs; pass 1 counts
// per (warp, expert), a scan turns the counts into each warp's first slot per expert, pass 2
// places the pairs (ranks inside a warp from __match_any_sync). Stable, so deterministic.
// Pairs whose expert id is out of range are left out (their outputs are not written).
// Measured and lost (H100, 2026-12-06, 50 launches chained in a graph): the scan spread over the
// warps (warp w scanning experts w, w + 32, ... over the 32 warps' counts, then warp 0 the
// experts' totals) gave the same scratch but 2.24 -> 4.09 us a launch at one token (64 experts),
// 3.15 -> 7.75 (160), 22.3 -> 23.9 at 2,048 tokens: its column reads conflict on one bank and
// it adds two block barriers. Nor (55th session) the ids staged in shared memory first, every
// thread's loads in flight at once: the same 24.2 us at 2,048 tokens, 45.3 at 4,096.
// =====================================================================================

// Steps both bucketings take (the one block below, the many blocks after it).
// A column of per-warp counts (kWarps of them, `stride` apart) into each warp's first slot, the
// warps in order from `first`.
template <int kWarps>
__device__ __forceinline__ void warp_counts_to_slots(int* column, int stride, int first) {
  for (int w = 0; w < kWarps; ++w) {
    const int c = column[w * stride];
    column[w * stride] = first;
    first += c;
  }
}

// The buckets' first slots, by one warp: an exclusive scan of total(e) over the experts, each
// expert's first slot given to start(e, slot). Returns the pairs placed (the same in every lane).
template <int kExperts, class Total, class Start>
__device__ __forceinline__ int scan_bucket_starts(int lane, Total total, Start start) {
  int running = 0;
  for (int eb = 0; eb < kExperts; eb += 32) {
    const int e = eb + lane;
    const int t = e < kExperts ? total(e) : 0;
    const int incl = warp_inclusive_sum(t);
    if (e < kExperts) start(e, running + incl - t);
    running += __shfl_sync(0xffffffffu, incl, 31);
  }
  return running;
}

// This lane's place among the warp's earlier lanes of the same expert (peers: __match_any_sync's).
__device__ __forceinline__ int rank_among_peers(unsigned peers, int lane) {
  return __popc(peers & ((1u << lane) - 1u));
}

template <int kExperts, int kTopK>
__global__ void __launch_bounds__(1024) moe_bucket_kernel(const int* __restrict__ ids, int* __restrict__ scratch,
                                                          int num_pairs) {
  pdl_release_and_wait();
  extern __shared__ int warp_counts[];  // [32][kExperts]: counts, then each warp's next slot
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < 32 * kExperts; i += 1024) warp_counts[i] = 0;
  __syncthreads();
  const int segment = round_up(ceil_div(num_pairs, 32), 32);
  const int begin = warp * segment, end = min(num_pairs, begin + segment);
  int* mine = warp_counts + warp * kExperts;

  for (int base = begin; base < end; base += 32) {
    const int p = base + lane;
    const int e = p < end ? ids[p] : -1;
    const bool valid = e >= 0 && e < kExperts;
    const unsigned active = __ballot_sync(0xffffffffu, valid);
    if (valid) {
      const unsigned peers = __match_any_sync(active, e);
      if (lane == __ffs(peers) - 1) mine[e] += __popc(peers);
    }
    __syncwarp();
  }
  __syncthreads();

  if (warp == 0) {
    const int placed = scan_bucket_starts<kExperts>(
        lane,
        [&](int e) {
          int total = 0;
          for (int w = 0; w < 32; ++w) total += warp_counts[w * kExperts + e];
          return total;
        },
        [&](int e, int first) {
          scratch[e] = first;
          warp_counts_to_slots<32>(warp_counts + e, kExperts, first);
        });
    if (lane == 0) scratch[kExperts] = placed;
  }
  __syncthreads();

  int* sorted = scratch + kExperts + 1;
  for (int base = begin; base < end; base += 32) {
    const int p = base + lane;
    const int e = p < end ? ids[p] : -1;
    const bool valid = e >= 0 && e < kExperts;
    const unsigned active = __ballot_sync(0xffffffffu, valid);
    unsigned peers = 0;
    if (valid) {
      peers = __match_any_sync(active, e);
      sorted[mine[e] + rank_among_peers(peers, lane)] = p;
    }
    __syncwarp();
    if (valid && lane == __ffs(peers) - 1) mine[e] += __popc(peers);
    __syncwarp();
  }
}

// =====================================================================================
// Bucketing of many pairs (a prefill's): the same buckets over many blocks. The one block above
// takes ~1.6 ns a pair (22.3 us at 2,048 tokens of DeepSeek-V2-Lite, 0.67 ms of its 2,048-token
// prefill over 26 layers), its 32 warps each walking 384 pairs in turn. Here block b takes the
// kBucketPairs pairs from b · kBucketPairs, one a thread:
//   moe_bucket_count_kernel  the block's pairs per expert, into counts [blocks][kExperts] (the
//                            scratch past the sorted pairs: moe_bucket_counts)
//   moe_bucket_place_kernel  every block reads all the counts: an expert's total over the blocks
//                            gives its bucket's first slot, the blocks before b its first slot for
//                            block b; inside the block, warps in order, lanes in order (ranks from
//                            __match_any_sync, as above). Block 0 writes the offsets.
// A stable counting sort either way: the same scratch, so the same bits downstream. DeepSeek-V2-Lite's
// 2,048-token prefill 24.60 -> 24.11 ms (H100, bench/RESULTS.md 2026-12-07 sixty-seventh session).
// =====================================================================================

constexpr int kBucketPairs = 256;  // pairs a block of the many-block bucketing, one a thread
constexpr int kBucketWarps = kBucketPairs / 32;

// Where the many-block bucketing keeps its counts: past the sorted pairs. The scratch holds
// moe_scratch_ints_per_token ints a token, so (tokens - 1) · (kExperts + 1) ints lie there unused.
template <int kExperts>
__host__ __device__ constexpr int* moe_bucket_counts(int* scratch, int num_pairs) {
  return scratch + kExperts + 1 + num_pairs;
}

template <int kExperts>
__global__ void __launch_bounds__(kBucketPairs) moe_bucket_count_kernel(const int* __restrict__ ids, int* scratch,
                                                                        int num_pairs) {
  pdl_release_and_wait();
  __shared__ int count[kExperts];
  for (int e = threadIdx.x; e < kExperts; e += kBucketPairs) count[e] = 0;
  __syncthreads();
  const int p = blockIdx.x * kBucketPairs + threadIdx.x;
  const int e = p < num_pairs ? ids[p] : -1;
  if (e >= 0 && e < kExperts) atomicAdd(&count[e], 1);  // integer counts: any order gives the same
  __syncthreads();
  int* counts = moe_bucket_counts<kExperts>(scratch, num_pairs) + blockIdx.x * kExperts;
  for (int i = threadIdx.x; i < kExperts; i += kBucketPairs) counts[i] = count[i];
}

template <int kExperts>
__global__ void __launch_bounds__(kBucketPairs) moe_bucket_place_kernel(const int* __restrict__ ids, int* scratch,
                                                                        int num_pairs) {
  pdl_release_and_wait();
  __shared__ int total[kExperts], before[kExperts];  // over all blocks; over the blocks before this one
  __shared__ int warp_next[kBucketWarps][kExperts];  // counts, then each warp's next slot
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, blocks = gridDim.x;
  const int* counts = moe_bucket_counts<kExperts>(scratch, num_pairs);
  for (int e = threadIdx.x; e < kExperts; e += kBucketPairs) {
    int all = 0, earlier = 0;
#pragma unroll 8
    for (int b = 0; b < blocks; ++b) {
      const int c = counts[b * kExperts + e];
      all += c;
      earlier += b < static_cast<int>(blockIdx.x) ? c : 0;
    }
    total[e] = all;
    before[e] = earlier;
  }
  for (int i = threadIdx.x; i < kBucketWarps * kExperts; i += kBucketPairs) (&warp_next[0][0])[i] = 0;

  // This thread's pair, its expert, and the lanes of the warp with the same expert.
  const int p = blockIdx.x * kBucketPairs + threadIdx.x;
  const int e = p < num_pairs ? ids[p] : -1;
  const bool valid = e >= 0 && e < kExperts;
  const unsigned active = __ballot_sync(0xffffffffu, valid);
  const unsigned peers = valid ? __match_any_sync(active, e) : 0u;
  __syncthreads();
  if (valid && lane == __ffs(peers) - 1) warp_next[warp][e] = __popc(peers);
  __syncthreads();

  if (warp == 0) {  // as the one block's: the buckets' first slots, then each warp's
    const int placed = scan_bucket_starts<kExperts>(
        lane, [&](int x) { return total[x]; },
        [&](int x, int first) {
          if (blockIdx.x == 0) scratch[x] = first;
          warp_counts_to_slots<kBucketWarps>(&warp_next[0][x], kExperts, first + before[x]);
        });
    if (lane == 0 && blockIdx.x == 0) scratch[kExperts] = placed;
  }
  __syncthreads();
  if (valid) scratch[kExperts + 1 + warp_next[warp][e] + rank_among_peers(peers, lane)] = p;
}

// Pairs from which the many-block bucketing runs: below, the one block's ~1.6 ns a pair is less
// than the second launch.
constexpr int kBucketManyBlocksFrom = 2048;

template <int kExperts, int kTopK>
inline void launch_moe_bucket(const int* ids, int* scratch, int tokens, cudaStream_t stream) {
  const int pairs = tokens * kTopK, blocks = ceil_div(pairs, kBucketPairs);
  // The counts fit the scratch's unused tail while the blocks are fewer than the tokens (a block
  // takes 256 pairs: kTopK <= 128 keeps that true from 2 tokens on).
  if (pairs >= kBucketManyBlocksFrom && static_cast<long long>(blocks) * kExperts <=
                                            static_cast<long long>(tokens - 1) * (kExperts + 1)) {
    KILN_LAUNCH(moe_bucket_count_kernel<kExperts>, blocks, kBucketPairs, 0, stream, ids, scratch, pairs);
    KILN_LAUNCH(moe_bucket_place_kernel<kExperts>, blocks, kBucketPairs, 0, stream, ids, scratch, pairs);
    return;
  }
  constexpr int kSmem = 32 * kExperts * 4;
  constexpr auto kernel = moe_bucket_kernel<kExperts, kTopK>;
  allow_dynamic_smem_once<kernel, kSmem>();
  KILN_LAUNCH(kernel, 1, 1024, kSmem, stream, ids, scratch, pairs);
}

// ---- grouped GEMM problems (prefill): one group per expert, tiles of 64 (tile_gemm.cuh) or pairs
// of 192-row tiles (tile_gemm_wgmma.cuh) of its pairs ----

template <int kExperts, int kTileRows = 64>
__device__ __forceinline__ bool locate_expert_tile(const int* scratch, int& group, int& m0, int& rows) {
  const GroupTile tile = locate_group_tile<kExperts>(scratch, blockIdx.y, kTileRows);
  if (tile.group < 0) return false;
  group = tile.group;
  m0 = tile.first;
  rows = min(kTileRows, tile.rows - tile.first);
  return true;
}

// What both grouped-GEMM problems over the experts' pairs share: a group per used expert, its rows
// the expert's pairs (token · kTopK + j) in bucket order.
template <int kExperts>
struct ExpertPairTiles {
  template <typename Args>
  __device__ static bool locate(const Args& a, int& group, int& m0, int& rows) {
    return locate_expert_tile<kExperts>(a.scratch, group, m0, rows);
  }
  template <typename Args>
  __device__ static int pair(const Args& a, int group, int m) {
    return expert_pairs<kExperts>(a.scratch, group)[m];
  }
  template <typename Args>
  __device__ static void prologue(const Args&, int, int, int) {}
  // Tile `index` of the tiles of tile_rows rows over every expert's pairs (tile_gemm_wgmma.cuh).
  template <typename Args>
  __device__ static GroupTile tile(const Args& a, int index, int tile_rows) {
    return locate_group_tile<kExperts>(a.scratch, index, tile_rows);
  }
  // Every expert's B as one matrix [kExperts × kN rows][kK] (the tensor copy engine's map).
  static constexpr int kGroups = kExperts;
  template <typename Args>
  static const bf16* b_base(const Args& a) {
    return a.weight;
  }
};

// Row tiles of kTileRows pairs over all experts: at most ceil(pairs / kTileRows) + (experts used).
template <int kExperts, int kTopK, int kTileRows = 64>
inline int expert_tile_bound(int tokens) {
  const int pairs = tokens * kTopK;
  return ceil_div(pairs, kTileRows) + min_int(kExperts, pairs);
}

// The grouped GEMM P over the experts' pairs of `tokens` tokens on Hopper: 192 × 256 tiles on
// wgmma, an expert's row tiles in pairs (tile_gemm_wgmma.cuh; gated problems too).
template <class P, int kExperts, int kTopK>
inline void launch_expert_gemm_wgmma(const typename P::Args& args, int tokens, cudaStream_t stream) {
  constexpr int kPairRows = 2 * TileGemmWgmmaShape::kBM;
  const dim3 grid(2 * tile_gemm_wgmma_column_tiles<P>(), expert_tile_bound<kExperts, kTopK, kPairRows>(tokens));
  launch_tile_gemm_wgmma<P>(args, grid, stream);
}

// The same on any GPU: elsewhere than on Hopper 64 × 128 tiles on mma.sync (tile_gemm.cuh).
template <class P, int kExperts, int kTopK>
inline void launch_expert_gemm(const typename P::Args& args, int tokens, cudaStream_t stream) {
  static_assert(!kGatedProblem<P>, "launch_expert_gemm: the mma.sync tiles have no gated epilogue");
  if (wgmma_device()) {
    launch_expert_gemm_wgmma<P, kExperts, kTopK>(args, tokens, stream);
  } else {
    launch_tile_gemm<P, 128>(args, dim3(ceil_div(P::kN, 128), expert_tile_bound<kExperts, kTopK>(tokens)), stream);
  }
}

}  // namespace detail

}  // namespace kiln
