// The grouped tile GEMM: one kernel for many small matrix products (an expert's pairs, a head's
// rows), used by the prefill paths of the routed experts and of MLA's absorbed projections.
#pragma once

#include "templates/blocks/mma.cuh"
#include "templates/common.cuh"

namespace kiln::detail {

// =====================================================================================
// Tile GEMM on tensor cores: C[m, n] = Σ_k A[m, k] · B[k, n] for the rows of one group (an expert,
// a head), bf16 in, fp32 accumulators, mma.sync m16n8k16 with ldmatrix and a 3-stage cp.async
// pipeline. A block computes 64 rows × kBN columns with 2 × kBN/32 warps of 32 × 32 each.
// A's rows are fetched through the problem (gathered token rows); B is either [kN][kK]
// (K-contiguous rows, nn.Linear weights: ldmatrix) or [kK][kN] (kBKMajor: ldmatrix.trans).
// 16-byte chunks: kK % 8 == 0, every A row and B row 16-byte aligned; partial tiles read zeros.
//
// The problem P provides:
//   static constexpr int kN, kK; static constexpr bool kBKMajor; struct Args;
//   static bool locate(const Args&, int& group, int& m0, int& rows)   block -> group, first row, rows (<= 64)
//   static const bf16* a_row(const Args&, int group, int m)           row m of the group's A
//   static const bf16* b_matrix(const Args&, int group)
//   struct Row; static Row row(const Args&, int group, int m)          where row m of C goes, looked up
//                                                                       once per thread and row
//   static void store(const Args&, const Row&, int n, float v0, float v1, bool two)  C[m, n], C[m, n + 1]
//   static void prologue(const Args&, int group, int m0, int rows)     blockIdx.x == 0 blocks, any extra work
// =====================================================================================

template <int kBN, bool kBKMajor>
struct TileGemmShape {
  static constexpr int kBM = 64, kBK = 32, kStages = 3;
  static constexpr int kWarpsN = kBN / 32, kWarps = 2 * kWarpsN, kThreads = kWarps * 32;
  // Shared row strides padded by 16 bytes: the 8 rows of an ldmatrix land in distinct banks.
  static constexpr int kAStride = kBK + 8;
  static constexpr int kBStride = kBKMajor ? kBN + 8 : kBK + 8;
  static constexpr int kATile = kBM * kAStride;
  static constexpr int kBTile = kBKMajor ? kBK * kBStride : kBN * kBStride;
  static constexpr int kSmemBytes = kStages * (kATile + kBTile) * 2;
  static constexpr int kAChunks = kBM * kBK / 8, kBChunks = kBN * kBK / 8;  // 16-byte chunks per tile
  static_assert(kBN == 64 || kBN == 128, "TileGemm: 64 or 128 columns per block");
  static_assert(kAChunks % kThreads == 0 && kBChunks % kThreads == 0, "TileGemm: whole chunks per thread");
};

template <class P, int kBN>
__global__ void __launch_bounds__(TileGemmShape<kBN, P::kBKMajor>::kThreads)
    tile_gemm_kernel(const typename P::Args args) {
  pdl_release_and_wait();
  using S = TileGemmShape<kBN, P::kBKMajor>;
  constexpr int kN = P::kN, kK = P::kK, BK = S::kBK;
  constexpr int kAPer = S::kAChunks / S::kThreads, kBPer = S::kBChunks / S::kThreads;
  constexpr int kKTiles = ceil_div(kK, BK);
  static_assert(kK % 8 == 0 && (!P::kBKMajor || kN % 8 == 0), "TileGemm: rows of whole 16-byte chunks");

  int group = 0, m0 = 0, rows = 0;
  if (!P::locate(args, group, m0, rows)) return;  // the same answer in every warp
  if (blockIdx.x == 0) P::prologue(args, group, m0, rows);
  const int n0 = blockIdx.x * kBN;

  extern __shared__ float4 smem_f4[];
  bf16* a_s = reinterpret_cast<bf16*>(smem_f4);
  bf16* b_s = a_s + S::kStages * S::kATile;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp / S::kWarpsN, wn = warp % S::kWarpsN;
  const int g = lane / 4, q = lane % 4;

  // This thread's chunks: fixed rows, the k offset moves by BK per tile.
  const bf16* a_src[kAPer];
  int a_dst[kAPer], a_k[kAPer];
  bool a_ok[kAPer];
#pragma unroll
  for (int i = 0; i < kAPer; ++i) {
    const int c = tid + i * S::kThreads, r = c / (BK / 8);
    a_k[i] = (c % (BK / 8)) * 8;
    a_ok[i] = r < rows;
    // Chunks outside the matrix copy nothing (src-size 0) but still name an address inside it.
    a_src[i] = P::a_row(args, group, m0 + (a_ok[i] ? r : 0)) + (a_k[i] < kK ? a_k[i] : 0);
    a_dst[i] = r * S::kAStride + a_k[i];
  }
  const bf16* b_mat = P::b_matrix(args, group);
  const bf16* b_src[kBPer];
  int b_dst[kBPer], b_k[kBPer];
  bool b_ok[kBPer];
#pragma unroll
  for (int i = 0; i < kBPer; ++i) {
    const int c = tid + i * S::kThreads;
    if constexpr (P::kBKMajor) {  // tile [BK][kBN]: chunk = (k row, 8 columns)
      const int kr = c / (kBN / 8), nc = (c % (kBN / 8)) * 8;
      b_k[i] = kr;
      b_ok[i] = n0 + nc < kN;
      b_src[i] = b_mat + static_cast<long long>(kr < kK ? kr : 0) * kN + (b_ok[i] ? n0 + nc : 0);
      b_dst[i] = kr * S::kBStride + nc;
    } else {  // tile [kBN][BK]: chunk = (n row, 8 k values)
      const int nr = c / (BK / 8), kc = (c % (BK / 8)) * 8;
      b_k[i] = kc;
      b_ok[i] = n0 + nr < kN;
      b_src[i] = b_mat + static_cast<long long>(b_ok[i] ? n0 + nr : 0) * kK + (kc < kK ? kc : 0);
      b_dst[i] = nr * S::kBStride + kc;
    }
  }

  auto load_tile = [&](int stage, int kt) {
    const int k0 = kt * BK;
    bf16* a_t = a_s + stage * S::kATile;
    bf16* b_t = b_s + stage * S::kBTile;
#pragma unroll
    for (int i = 0; i < kAPer; ++i) {
      const bool ok = a_ok[i] && k0 + a_k[i] < kK;
      cp_async_16(a_t + a_dst[i], ok ? a_src[i] + k0 : a_src[i], ok);
    }
#pragma unroll
    for (int i = 0; i < kBPer; ++i) {
      const bool ok = b_ok[i] && k0 + b_k[i] < kK;
      const long long step = P::kBKMajor ? static_cast<long long>(k0) * kN : k0;
      cp_async_16(b_t + b_dst[i], ok ? b_src[i] + step : b_src[i], ok);
    }
  };

  float acc[2][4][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < kKTiles) load_tile(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < kKTiles; ++kt) {
    cp_async_wait<S::kStages - 2>();  // tile kt has landed
    __syncthreads();                  // ... for every thread, and everyone is done with tile kt - 1
    if (kt + S::kStages - 1 < kKTiles) load_tile((kt + S::kStages - 1) % S::kStages, kt + S::kStages - 1);
    cp_async_commit();
    const bf16* a_t = a_s + (kt % S::kStages) * S::kATile;
    const bf16* b_t = b_s + (kt % S::kStages) * S::kBTile;
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      unsigned af[2][4], bfr[4][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        ldmatrix_x4(af[mi], a_t + (wm * 32 + mi * 16 + ((lane / 8) % 2) * 8 + lane % 8) * S::kAStride + kk * 16 +
                                (lane / 16) * 8);
      }
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        unsigned b[4];
        if constexpr (P::kBKMajor) {
          ldmatrix_x4_trans(b, b_t + (kk * 16 + ((lane / 8) % 2) * 8 + lane % 8) * S::kBStride + wn * 32 + nj * 16 +
                                   (lane / 16) * 8);
        } else {
          ldmatrix_x4(b, b_t + (wn * 32 + nj * 16 + (lane / 16) * 8 + lane % 8) * S::kBStride + kk * 16 +
                             ((lane / 8) % 2) * 8);
        }
        bfr[2 * nj][0] = b[0];
        bfr[2 * nj][1] = b[1];
        bfr[2 * nj + 1][0] = b[2];
        bfr[2 * nj + 1][1] = b[3];
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) mma_bf16_16816(acc[mi][ni], af[mi], bfr[ni]);
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
    const int m = wm * 32 + mi * 16 + g;
    const typename P::Row row0 = P::row(args, group, m0 + min(m, rows - 1));
    const typename P::Row row8 = P::row(args, group, m0 + min(m + 8, rows - 1));
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const int n = n0 + wn * 32 + ni * 8 + 2 * q;
      if (n >= kN) continue;
      if (m < rows) P::store(args, row0, n, acc[mi][ni][0], acc[mi][ni][1], n + 1 < kN);
      if (m + 8 < rows) P::store(args, row8, n, acc[mi][ni][2], acc[mi][ni][3], n + 1 < kN);
    }
  }
}

// grid: (column tiles, row tiles, groups) as the problem's locate() reads them.
template <class P, int kBN>
inline void launch_tile_gemm(const typename P::Args& args, dim3 grid, cudaStream_t stream) {
  using S = TileGemmShape<kBN, P::kBKMajor>;
  constexpr auto kernel = tile_gemm_kernel<P, kBN>;
  allow_dynamic_smem_once<kernel, S::kSmemBytes>();
  KILN_LAUNCH(kernel, grid, S::kThreads, S::kSmemBytes, stream, args);
}

}  // namespace kiln::detail
