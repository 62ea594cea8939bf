// The grouped tile GEMM on Hopper's warpgroup tensor cores (sm_90a: wgmma.mma_async), for the
// routed experts' prefill: C[m, n] = Σ_k A[m, k] · B[n, k] over the rows of one group (an expert's
// pairs), B [kN][kK] with K-contiguous rows (nn.Linear weights). The problem interface is
// tile_gemm.cuh's (a_row, b_matrix, store, prologue), plus tile (a group's row tiles), kGroups and
// b_base (every group's B as one matrix, for the tensor copy engine's map).
//
// A block computes 192 rows × 256 columns: three warpgroups of 64 rows, each multiplying its rows
// by the block's whole B tile (two m64n128k16 products per k16 step, A and B from shared memory). K
// goes by 64 (one 128-byte swizzled row per tile row) through 4 shared-memory stages filled two
// tiles ahead: A's rows by cp.async (every gathered row has its own address, which the tensor copy
// engine cannot take), B's 256 rows by the tensor copy engine (TMA, blocks/tma.cuh) as two boxes of
// 128 rows counted on the stage's mbarrier. A warpgroup whose rows are all past the group's end
// skips its products.
//
// The grid: x = 2 × the column tile + which of a pair of row tiles, y = the pair: a group's rows go
// in pairs of 384, and the two blocks of a pair (the same columns, so the same B tiles) are
// dispatched one after the other, each reading B while the other does (DeepSeek-V2-Lite's gate|up
// at 2,048 tokens on an H100: 351 -> 339 us against row tiles in y; bench/RESULTS.md 2026-12-06).
//
// A gated problem (P::kGated, SwiGLU's gate | up rows) has B = [gate rows; up rows], kN / 2 each:
// the block's 256 columns are gate features [n0, n0 + 128) and the same up features, so each
// thread holds a feature's gate and up accumulators side by side and the problem's store takes
// both (store_gated).
//
// Why these sizes: an expert's pairs are few (2,048 tokens × top-6 of 64 experts: ~190 each), so
// rows per tile are what the tile can reuse B over; 128 × 256 reads 48 KB per 4.2 MFLOP k-tile,
// where the mma.sync tile_gemm's 64 × 128 reads 24 KB per 1 MFLOP (bench_kernels --moe-only,
// DeepSeek-V2-Lite's gate|up at 2,048 tokens on an H200: 348 against 175 TFLOP/s), and 192 × 256
// 56 KB per 6.3 MFLOP, with an expert of up to 192 pairs reading its B once (H100, 2,048 tokens:
// gate|up 341.0 -> 326.4 us, down 203.2 -> 196.1 against 128 rows; bench/RESULTS.md 2026-12-06,
// 55th session). Four warpgroups would need 128 accumulators of 512 threads: more registers than
// an SM has; three take 162 of the 168 each can have, and four stages 225 of 227 KB.
// The same bits for a row whatever other rows share its tile: every output is one warpgroup's
// accumulation over k in order.
#pragma once

#include "templates/blocks/mma.cuh"
#include "templates/blocks/tma.cuh"
#include "templates/blocks/wgmma.cuh"
#include "templates/common.cuh"

#ifndef __CUDACC_RTC__
#include <stdexcept>
#include <string>
#endif

namespace kiln::detail {

struct TileGemmWgmmaShape {
  static constexpr int kWarpGroups = 3;
  static constexpr int kBM = 64 * kWarpGroups, kBN = 256, kBK = 64, kStages = 4, kAhead = 2;
  static constexpr int kThreads = 128 * kWarpGroups;
  static constexpr int kABytes = kBM * kSwizzleRowBytes, kBBytes = kBN * kSwizzleRowBytes;
  static constexpr int kSmemBytes = kStages * (kABytes + kBBytes) + kSwizzleGroupBytes;  // + room to align
  static constexpr int kAPer = kBM * 8 / kThreads;  // 16-byte chunks of A per thread
  static constexpr int kBoxRows = kBN / 2, kBoxBytes = kBoxRows * kSwizzleRowBytes;  // B's two TMA boxes
  // Measured and lost (DeepSeek-V2-Lite's gate_up with SwiGLU at 2,048 tokens on an H200, 2026-11-28;
  // ncu there: tensor pipe 50% busy, DRAM 37%, one block a SM):
  // - B's k-tiles asked into L2 ahead of the copies (a 128-byte cp.async.bulk.prefetch.L2 per B
  //   row, 3 to 16 tiles ahead): 358 -> 640-700 us.
  // - Copies 3 tiles ahead (every stage but the one being read), each warpgroup waiting for its
  //   products every tile: 371 -> 412-439 us (1% faster at 512 tokens).
  // - An expert's two row tiles paired in a cluster, each block copying half of every B tile into
  //   both with one TMA multicast, a producer warpgroup ahead of two consumer warpgroups on
  //   mbarriers (2026-11-28, 13th session; ncu had L2 at 80% of its peak here): 390 -> 590 us, and
  //   as slow unclustered with each block copying its whole B by TMA (598), so the loss is in that
  //   pipeline, not in the multicast; not found in the session's device time.
  // - Rows past a group's end not copied at all (no zero-filling cp.async): 402 -> 424 us.
  // - A pair's two blocks in a cluster, each copying one box of B into both (TMA multicast: B read
  //   from L2 once for 256 rows), 2026-12-06 on an H100, gate|up at 2,048 tokens: 339 -> 434 us
  //   with an mbarrier a stage that the other block's warps arrive on when done with it (the
  //   copy's thread waiting there), 500 with a cluster barrier a k-tile instead, and as slow
  //   (503) with that barrier but no multicast: the pair's pacing, not the copies, loses (ncu: L2
  //   56% against 77%, SM throughput 34% against 51%). The same bits in every variant.
  // - 2026-12-06 (55th session, H100, gate|up at 2,048 tokens against 325 us with 192-row tiles):
  //   the operands swapped (weight rows as wgmma's M, an expert's pairs as N up to 256, so that
  //   each weight row is read once) 412-461 us, its stages holding 24 KB of weights in flight
  //   against 32; an mbarrier pair a stage in place of the block barrier 329; B's tiles asked into
  //   L2 4-8 k-tiles ahead by cp.async.bulk.prefetch.tensor 375-423; the multicast pair with five B
  //   stages 433.
};

// Whether P's columns are gate | up halves (see the top).
template <class P>
constexpr bool kGatedProblem = requires { requires P::kGated; };

template <class P>
__global__ void __launch_bounds__(TileGemmWgmmaShape::kThreads, 1)
    tile_gemm_wgmma_kernel(const typename P::Args args, const __grid_constant__ TmaMap b_map) {
  pdl_release_and_wait();
  using S = TileGemmWgmmaShape;
  constexpr int kN = P::kN, kK = P::kK, BM = S::kBM, BN = S::kBN, BK = S::kBK;
  constexpr int kKTiles = ceil_div(kK, BK);
  constexpr bool kGated = kGatedProblem<P>;
  constexpr int kCols = kGated ? kN / 2 : kN;         // output columns (features of each half when gated)
  constexpr int kBlockCols = kGated ? BN / 2 : BN;  // of them per block
  static_assert(!P::kBKMajor && kK % 8 == 0, "tile_gemm_wgmma: B [N][K] with rows of whole 16-byte chunks");
  static_assert(!kGated || kN % 2 == 0, "tile_gemm_wgmma: gated B has two halves of kN / 2 rows");
  static_assert(S::kStages >= S::kAhead + 2, "a stage is refilled once every warpgroup's products of it are done");
  static_assert(BK == kTmaBoxCols && S::kBBytes == 2 * S::kBoxBytes, "B's k-tile is two boxes of the map");

  // The pair of row tiles (blockIdx.y) and which of its two this block takes (blockIdx.x % 2).
  const auto pair = P::tile(args, static_cast<int>(blockIdx.y), 2 * BM);  // group, first row, group's rows
  if (pair.group < 0) return;  // the same answer in every warp
  const int group = pair.group, m0 = pair.first + static_cast<int>(blockIdx.x % 2) * BM;
  const int rows = min(BM, pair.rows - m0);
  if (rows <= 0) return;  // the second tile of a pair whose rows fit the first
  if (blockIdx.x / 2 == 0) P::prologue(args, group, m0, rows);
  const int n0 = static_cast<int>(blockIdx.x / 2) * kBlockCols;

  extern __shared__ float4 smem_f4[];
  // The swizzle pattern repeats every 1024 bytes of address: the tiles start on such a boundary.
  char* smem = reinterpret_cast<char*>(
      (reinterpret_cast<unsigned long long>(smem_f4) + kSwizzleGroupBytes - 1) & ~(kSwizzleGroupBytes - 1ull));
  char* a_s = smem;                            // [kStages][BM rows × 128 bytes]
  char* b_s = smem + S::kStages * S::kABytes;  // [kStages][BN rows × 128 bytes]: box 0's rows, then box 1's
  __shared__ unsigned long long b_landed[S::kStages];  // stage s's B k-tile is in (both boxes)

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, q = lane % 4;
  // The warpgroup's index from lane 0: the compiler then knows it is the same in every lane, and
  // keeps the wgmma pipeline across the branch on it (`busy`) instead of serializing it.
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);

  if (tid == 0) {
    for (int s = 0; s < S::kStages; ++s) mbarrier_init(&b_landed[s], 1);
    fence_mbarrier_init();
  }
  __syncthreads();

  // This thread's chunks of A: 16 bytes at k = 8·kc of rows r0 + kRowStep·i, the k offset moving by
  // BK a tile. Chunks outside the matrix copy nothing (src-size 0) but still name an address inside it.
  constexpr int kRowStep = S::kThreads / 8;
  const int kc = tid % 8, r0 = tid / 8, kc_safe = 8 * kc < kK ? 8 * kc : 0;
  const bf16* a_src[S::kAPer];
  bool a_ok[S::kAPer];
#pragma unroll
  for (int i = 0; i < S::kAPer; ++i) {
    const int r = r0 + kRowStep * i;
    a_ok[i] = r < rows;
    a_src[i] = P::a_row(args, group, m0 + (a_ok[i] ? r : 0)) + kc_safe;
  }
  // B's boxes, as rows of the map (every group's kN rows in turn): box 0 the block's first 128
  // columns, box 1 the next 128, or gated the same features' up rows. Rows past the block's
  // columns are copied but never stored (past the matrix: zeros, as are columns past kK).
  const int box_row0 = group * kN + n0;
  const int box_row1 = box_row0 + (kGated ? kCols : S::kBoxRows);
  auto load_tile = [&](int stage, int kt) {
    const int k0 = kt * BK;
    const bool k_ok = k0 + 8 * kc < kK;
    char* a_t = a_s + stage * S::kABytes;
#pragma unroll
    for (int i = 0; i < S::kAPer; ++i) {
      const bool ok = a_ok[i] && k_ok;
      cp_async_16(a_t + swizzled_offset(BM, r0 + kRowStep * i, kc), ok ? a_src[i] + k0 : a_src[i], ok);
    }
    if (tid == 0) {
      char* b_t = b_s + stage * S::kBBytes;
      mbarrier_arrive_expect_tx(&b_landed[stage], S::kBBytes);
      tma_load_2d(b_t, &b_map, k0, box_row0, &b_landed[stage]);
      tma_load_2d(b_t + S::kBoxBytes, &b_map, k0, box_row1, &b_landed[stage]);
    }
  };

  float acc[2][64];  // columns [0, 128) and [128, 256) of the warpgroup's 64 rows
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[h][i] = 0.0f;
  const bool busy = wg * 64 < rows;  // this warpgroup has rows in the tile

#pragma unroll
  for (int s = 0; s < S::kAhead; ++s) {
    if (s < kKTiles) load_tile(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < kKTiles; ++kt) {
    cp_async_wait<S::kAhead - 1>();  // tile kt's rows of A have landed (this thread's copies)
    fence_proxy_async_shared();      // ... are visible to the tensor cores' reads
    __syncthreads();                 // ... for every thread's copies; every product of tile kt - 2 is done
    if (kt + S::kAhead < kKTiles) load_tile((kt + S::kAhead) % S::kStages, kt + S::kAhead);
    cp_async_commit();
    mbarrier_wait(&b_landed[kt % S::kStages], (kt / S::kStages) & 1);  // tile kt's B, both boxes
    if (busy) {
      const int stage = kt % S::kStages;
      const unsigned long long a_desc = k_major_descriptor(a_s + stage * S::kABytes + wg * 64 * kSwizzleRowBytes);
      const unsigned long long b_desc = k_major_descriptor(b_s + stage * S::kBBytes);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        const int step = k_major_step_bytes(BM, kk);  // within one swizzled area: kk · 32 bytes
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          wgmma_bf16_ss(acc[h], descriptor_plus(a_desc, step),
                        descriptor_plus(b_desc, h * 128 * kSwizzleRowBytes + step), 1);
        }
      }
      wgmma_commit();
      wgmma_wait<1>();  // tile kt - 1's products are done: its stage may be refilled after the next barrier
    }
  }
  cp_async_wait<0>();
  if (!busy) return;
  wgmma_wait<0>();
#pragma unroll
  for (int h = 0; h < 2; ++h) wgmma_fence_registers(acc[h]);

  // Each of the thread's two rows is looked up once (a gathered row: two dependent loads).
  const int m = wg * 64 + (warp % 4) * 16 + g;
  const typename P::Row row0 = P::row(args, group, m0 + min(m, rows - 1));
  const typename P::Row row8 = P::row(args, group, m0 + min(m + 8, rows - 1));
  if constexpr (kGated) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int n = n0 + 8 * j + 2 * q;
      if (n >= kCols) continue;
      const float* gate = acc[0] + 4 * j;
      const float* up = acc[1] + 4 * j;
      if (m < rows) P::store_gated(args, row0, n, gate[0], gate[1], up[0], up[1], n + 1 < kCols);
      if (m + 8 < rows) P::store_gated(args, row8, n, gate[2], gate[3], up[2], up[3], n + 1 < kCols);
    }
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int n = n0 + h * 128 + 8 * j + 2 * q;
        if (n >= kN) continue;
        if (m < rows) P::store(args, row0, n, acc[h][4 * j], acc[h][4 * j + 1], n + 1 < kN);
        if (m + 8 < rows) P::store(args, row8, n, acc[h][4 * j + 2], acc[h][4 * j + 3], n + 1 < kN);
      }
    }
  }
}

// grid: (2 × the column tiles of 256, or gated of 128 features: tile_gemm_wgmma_column_tiles; the
// pairs of row tiles, as the problem's tile(index, 2 · kBM) counts them). Only on compute capability
// 9.0 (wgmma_device()).
template <class P>
constexpr int tile_gemm_wgmma_column_tiles() {
  constexpr int kBN = TileGemmWgmmaShape::kBN;
  return kGatedProblem<P> ? ceil_div(P::kN / 2, kBN / 2) : ceil_div(P::kN, kBN);
}

template <class P>
inline void launch_tile_gemm_wgmma(const typename P::Args& args, dim3 grid, cudaStream_t stream) {
  using S = TileGemmWgmmaShape;
  TmaMap b_map{};
#ifndef __CUDACC_RTC__
  const long long b_rows = static_cast<long long>(P::kGroups) * P::kN;
  if (!bf16_rows_tma_map(P::b_base(args), b_rows, P::kK, S::kBoxRows, b_map)) {
    throw std::runtime_error("tile_gemm_wgmma: the driver gave no tensor copy map of the experts' weights [" +
                             std::to_string(b_rows) + " x " + std::to_string(P::kK) +
                             "] (cuTensorMapEncodeTiled; the base must be 16-byte aligned)");
  }
#endif
  constexpr auto kernel = tile_gemm_wgmma_kernel<P>;
  allow_dynamic_smem_once<kernel, S::kSmemBytes>();
  KILN_LAUNCH(kernel, grid, S::kThreads, S::kSmemBytes, stream, args, b_map);
}

}  // namespace kiln::detail
