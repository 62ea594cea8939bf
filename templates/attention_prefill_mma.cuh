// Prefill attention on tensor cores, FlashAttention-2 style (mma.sync m16n8k16, bf16 in, fp32
// accumulators and online softmax), over the keys and values of a source (the paged KV cache).
//
// A block takes one KV head and 64 "rows", a row being (query token, query head of the group):
// token-major, so the query heads sharing a KV head share every K/V tile the block loads (GQA).
// Each of the 4 warps owns 16 rows: it keeps its Q fragments in registers for the whole key loop,
// computes S = Q·Kᵀ for a tile of 64 keys, updates the running max / sum, and accumulates
// O += P·V with P taken straight from the S accumulators (their layout is the A operand's).
// K and V tiles come through shared memory with cp.async from a key/value source
// (blocks/prefill_kv.cuh: the paged cache, or MLA's keys and values expanded from the latent);
// loading the next K tile overlaps the softmax and P·V, loading the next V tile overlaps the next
// Q·Kᵀ.
// Rows attend to keys 0..positions[token]: tiles wholly below the block's smallest position skip
// the mask. Scores are in log2 units (scale · log2 e folded into one multiply) for exp2.
#pragma once

#include "templates/blocks/mma.cuh"
#include "templates/blocks/prefill_kv.cuh"
#include "templates/blocks/prefill_rows.cuh"
#include "templates/common.cuh"

namespace kiln::detail {

// kHeadDim: the width of q and k; kVDim: of v and the output (DeepSeek's 192 and 128).
template <int kHeads, int kKvHeads, int kHeadDim, int kVDim = kHeadDim>
struct PrefillShape {
  static constexpr bool kSupported = kHeadDim % 16 == 0 && kVDim % 16 == 0;
  static constexpr int kGroup = kHeads / kKvHeads;
  static constexpr int kBlockM = 64;                  // rows (token, head) per block
  static constexpr int kBlockN = 64;                  // keys per tile
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kStride = kHeadDim + 8;        // shared row stride in bf16: the 16-byte pad makes
                                                      // the 8 rows of an ldmatrix hit distinct banks
  static constexpr int kTileElems = kBlockN * kStride;
  static constexpr int kSmemBytes = 2 * kTileElems * 2;  // K and V tiles; Q passes through the V tile
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks of a q or k row
  static constexpr int kVChunksPerRow = kVDim / 8;    // of a v row
  static constexpr int kKSteps = kHeadDim / 16;       // k16 steps of Q·Kᵀ
  static constexpr int kDTiles = kVDim / 8;           // n8 tiles of O
  static constexpr int kKeyTiles = kBlockN / 8;       // n8 tiles of S
};

// Keys (kValues false) or values of key tile `key_tile` into `dst` (rows of Shape::kStride), zero-filled
// past num_keys (0 · garbage could be NaN). A chunk past the end copies nothing from key 0's address,
// so that no branch goes around the address computation (with one, bench_kernels --prefill-only ran
// 7% slower; bench/RESULTS.md, 2026-11-28 eleventh session).
template <bool kValues, class Shape, class Kv>
__device__ __forceinline__ void load_tile(const Kv& kv, int kv_head, int key_tile, int num_keys, bf16* dst) {
  constexpr int kChunks = kValues ? Shape::kVChunksPerRow : Shape::kChunksPerRow;
  for (int c = threadIdx.x; c < Shape::kBlockN * kChunks; c += Shape::kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const int key = key_tile * Shape::kBlockN + r;
    const bool valid = key < num_keys;
    const int at = valid ? key : 0;
    cp_async_16(dst + r * Shape::kStride + col, kValues ? kv.value(kv_head, at, col) : kv.key(kv_head, at, col), valid);
  }
}

// out [T, kHeads · kVDim]; Kv: a source of blocks/prefill_kv.cuh.
template <int kHeads, int kKvHeads, int kHeadDim, int kVDim, int kRow, class Kv>
__global__ void __launch_bounds__(128)
    attention_prefill_mma_kernel(const bf16* __restrict__ q_rows, Kv kv, bf16* __restrict__ out,
                                 const int* __restrict__ query_start, const int* __restrict__ positions,
                                 float scale_log2, bool heads_inner) {
  pdl_release_and_wait();
  using Shape = PrefillShape<kHeads, kKvHeads, kHeadDim, kVDim>;
  static_assert(Shape::kSupported && kRow % 8 == 0, "attention_prefill_mma: k16 steps and 16-byte aligned q rows");
  constexpr int G = Shape::kGroup, D = kHeadDim, BM = Shape::kBlockM, BN = Shape::kBlockN;
  constexpr int S = Shape::kStride, CPR = Shape::kChunksPerRow;

  const PrefillTile block = prefill_tile<kKvHeads>(heads_inner);
  const int seq = block.seq, kv_head = block.kv_head, tile = block.tile;
  kv.bind(seq);
  const int q_begin = query_start[seq];
  const int rows = (query_start[seq + 1] - q_begin) * G;
  if (tile * BM >= rows) return;

  extern __shared__ float4 smem_f4[];
  bf16* k_tile = reinterpret_cast<bf16*>(smem_f4);
  bf16* v_tile = k_tile + Shape::kTileElems;
  __shared__ int bounds[2 * BM / 32];  // prefill_block_bounds's

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, q = lane % 4;

  // The block's key range and where the mask can start; this thread's rows' positions.
  int max_pos, min_pos;
  prefill_block_bounds<BM, G>(positions, q_begin, rows, tile, bounds, max_pos, min_pos);
  const int num_keys = max_pos + 1;
  const int num_tiles = ceil_div(num_keys, BN);
  int row_pos[2];
  prefill_row_positions<G>(positions, q_begin, rows, tile * BM + warp * 16 + g, max_pos, row_pos);

  // Q of the block's rows, through the V tile, into registers.
  for (int c = tid; c < BM * CPR; c += Shape::kThreads) {
    const int r = c / CPR, col = (c % CPR) * 8;
    const int row = tile * BM + r;
    const bool valid = row < rows;
    const bf16* src =
        valid ? q_rows + static_cast<long long>(q_begin + row / G) * kRow + (kv_head * G + row % G) * D + col : q_rows;
    cp_async_16(v_tile + r * S + col, src, valid);
  }
  load_tile<false, Shape>(kv, kv_head, 0, num_keys, k_tile);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  unsigned qf[Shape::kKSteps][4];
#pragma unroll
  for (int kk = 0; kk < Shape::kKSteps; ++kk) {
    ldmatrix_x4(qf[kk], v_tile + (warp * 16 + ((lane / 8) % 2) * 8 + lane % 8) * S + kk * 16 + (lane / 16) * 8);
  }
  __syncthreads();
  load_tile<true, Shape>(kv, kv_head, 0, num_keys, v_tile);
  cp_async_commit();

  float o[Shape::kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < Shape::kDTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dt][e] = 0.0f;
  float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f};

  for (int j = 0; j < num_tiles; ++j) {
    cp_async_wait<1>();  // K tile j has landed (V tile j may still be in flight)
    __syncthreads();

    // ---- S = Q·Kᵀ for 64 keys ----
    float s[Shape::kKeyTiles][4];
#pragma unroll
    for (int nt = 0; nt < Shape::kKeyTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < Shape::kKSteps; ++kk) {
#pragma unroll
      for (int nt2 = 0; nt2 < Shape::kKeyTiles / 2; ++nt2) {
        unsigned b[4];
        ldmatrix_x4(b, k_tile + ((nt2 * 2 + lane / 16) * 8 + lane % 8) * S + kk * 16 + ((lane / 8) % 2) * 8);
        const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
        mma_bf16_16816(s[2 * nt2], qf[kk], b0);
        mma_bf16_16816(s[2 * nt2 + 1], qf[kk], b1);
      }
    }
    __syncthreads();  // every warp is done with K tile j
    if (j + 1 < num_tiles) load_tile<false, Shape>(kv, kv_head, j + 1, num_keys, k_tile);
    cp_async_commit();

    // ---- online softmax over the tile ----
    const bool need_mask = j * BN + BN - 1 > min_pos;
    float tile_max[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int nt = 0; nt < Shape::kKeyTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = j * BN + nt * 8 + 2 * q + (e & 1);
        float v = s[nt][e] * scale_log2;
        if (need_mask && key > row_pos[e / 2]) v = neg_inf();
        s[nt][e] = v;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], v);
      }
    }
    float correction[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
      const float m_new = fmaxf(m[i], tile_max[i]);
      const float m_use = m_new == neg_inf() ? 0.0f : m_new;  // a row with no key yet stays at zero
      correction[i] = exp2f(m[i] - m_use);
      m[i] = m_new;
      tile_max[i] = m_use;
    }
    float row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < Shape::kKeyTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - tile_max[e / 2]);
        row_sum[e / 2] += s[nt][e];
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) l[i] = l[i] * correction[i] + row_sum[i];
#pragma unroll
    for (int dt = 0; dt < Shape::kDTiles; ++dt) {
      o[dt][0] *= correction[0];
      o[dt][1] *= correction[0];
      o[dt][2] *= correction[1];
      o[dt][3] *= correction[1];
    }

    cp_async_wait<1>();  // V tile j has landed (K tile j + 1 may still be in flight)
    __syncthreads();

    // ---- O += P·V ----
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const unsigned a[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                             pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dt2 = 0; dt2 < Shape::kDTiles / 2; ++dt2) {
        unsigned b[4];
        ldmatrix_x4_trans(b, v_tile + (kk * 16 + ((lane / 8) % 2) * 8 + lane % 8) * S + (dt2 * 2 + lane / 16) * 8);
        const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
        mma_bf16_16816(o[2 * dt2], a, b0);
        mma_bf16_16816(o[2 * dt2 + 1], a, b1);
      }
    }
    __syncthreads();  // every warp is done with V tile j
    if (j + 1 < num_tiles) load_tile<true, Shape>(kv, kv_head, j + 1, num_keys, v_tile);
    cp_async_commit();
  }
  cp_async_wait<0>();

  // ---- O / l, rounded once ----
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    const float inv_l = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    const int row = tile * BM + warp * 16 + g + i * 8;
    if (row < rows) {
      const long long t = q_begin + row / G;
      bf16* dst = out + t * kHeads * kVDim + (kv_head * G + row % G) * kVDim + 2 * q;
#pragma unroll
      for (int dt = 0; dt < Shape::kDTiles; ++dt) {
        const unsigned packed = pack_bf16x2(o[dt][2 * i] * inv_l, o[dt][2 * i + 1] * inv_l);
        *reinterpret_cast<unsigned*>(dst + dt * 8) = packed;
      }
    }
  }
}

// The launch: one block per 64 (token, head) rows of a sequence and KV head.
template <int kHeads, int kKvHeads, int kHeadDim, int kVDim, int kRow, class Kv>
void launch_prefill_mma(const bf16* q_rows, const Kv& kv, bf16* out, const int* query_start, const int* positions,
                        int num_seqs, int max_query_len, float scale, cudaStream_t stream) {
  launch_prefill_rows<attention_prefill_mma_kernel<kHeads, kKvHeads, kHeadDim, kVDim, kRow, Kv>,
                      PrefillShape<kHeads, kKvHeads, kHeadDim, kVDim>, kKvHeads>(
      q_rows, kv, out, query_start, positions, num_seqs, max_query_len, scale, stream);
}

}  // namespace kiln::detail
