// Absorbed MLA attention (ref::mla_attention): multi-query attention of kHeads query heads over ONE
// latent KV head of width kLatent + kRope per token, the values being its first kLatent values.
// Cache of one layer: one latent row per slot (kv_layout.hpp LatentLayout). Decode splits every
// context of more than one key tile into partitions (up to max_partitions, whole tiles each)
// merged like dense attention's (blocks/split_kv.cuh): one block serves all heads of a sequence,
// so the partitions are what spreads a sequence's cache reads over several SMs.
// Scores are kept in log2 units (q·k times scale · log2 e) so exp2 does the exponentials.
#pragma once

#include "templates/blocks/mma.cuh"
#include "templates/blocks/split_kv.cuh"
#include "templates/common.cuh"
#include "templates/kv_layout.hpp"

namespace kiln {

namespace detail {

// ---- CUDA cores: one warp per (query token, head) row, online softmax over its keys ----
// Prefill: grid (ceil(max_query_len · kHeads / kWarpRowsPerBlock), num_seqs); decode: grid
// (ceil(kHeads / kWarpRowsPerBlock), num_seqs).
template <int kHeads, int kLatent, int kRope, int kPageSize, bool kDecode>
__global__ void __launch_bounds__(kWarpRowThreads)
    mla_attention_warp_kernel(const bf16* __restrict__ q_mla, const bf16* __restrict__ cache, bf16* __restrict__ o_lat,
                              const int* __restrict__ query_start, const int* __restrict__ positions_or_context,
                              const int* __restrict__ block_tables, int max_pages_per_seq, int max_keys,
                              float scale_log2) {
  pdl_release_and_wait();
  constexpr int kWidth = kLatent + kRope;
  constexpr int kPerQ = ceil_div(kWidth, 32), kPerO = ceil_div(kLatent, 32);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int seq = blockIdx.y;
  const int row = blockIdx.x * kWarpRowsPerBlock + warp;
  long long t;
  int head, keys;
  if constexpr (kDecode) {
    if (row >= kHeads) return;
    t = seq;
    head = row;
    keys = min(positions_or_context[seq], max_keys);
  } else {
    const int begin = query_start[seq];
    if (row >= (query_start[seq + 1] - begin) * kHeads) return;
    t = begin + row / kHeads;
    head = row % kHeads;
    keys = positions_or_context[t] + 1;
  }
  const bf16* qh = q_mla + (t * kHeads + head) * kWidth;
  float q[kPerQ];
#pragma unroll
  for (int i = 0; i < kPerQ; ++i) {
    const int d = lane + 32 * i;
    q[i] = d < kWidth ? __bfloat162float(qh[d]) * scale_log2 : 0.0f;
  }
  const int* pages = block_tables + static_cast<long long>(seq) * max_pages_per_seq;
  float m = neg_inf(), l = 0.0f, acc[kPerO];
#pragma unroll
  for (int i = 0; i < kPerO; ++i) acc[i] = 0.0f;
  for (int j = 0; j < keys; ++j) {
    const bf16* kv = cache + LatentLayout{kWidth}.row(static_cast<long long>(pages[j / kPageSize]) * kPageSize + j % kPageSize);
    float k[kPerQ], dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerQ; ++i) {
      const int d = lane + 32 * i;
      k[i] = d < kWidth ? __bfloat162float(kv[d]) : 0.0f;
      dot += q[i] * k[i];
    }
    dot = warp_sum(dot);
    const float m_new = fmaxf(m, dot);
    const float correction = exp2f(m - m_new), p = exp2f(dot - m_new);
    l = l * correction + p;
#pragma unroll
    for (int i = 0; i < kPerO; ++i) acc[i] = acc[i] * correction + p * k[i];  // k[i] of a value dim (i < kPerO)
    m = m_new;
  }
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
  bf16* out = o_lat + (t * kHeads + head) * kLatent;
#pragma unroll
  for (int i = 0; i < kPerO; ++i) {
    const int d = lane + 32 * i;
    if (d < kLatent) out[d] = __float2bfloat16_rn(acc[i] * inv_l);
  }
}

// ---- tensor cores: FlashAttention-2 style over 64-key tiles of the latent cache ----
//
// A block takes kRows = 16·kMTiles query rows, a row being (token, head): all heads of a decode
// sequence (or a group of 16·kMTiles of them), or consecutive (token, head) rows of a prefill
// sequence. Every cache row a block loads serves all its rows: that is the point of MLA's single
// latent head. Warp (mt, cw) of the 4·kMTiles warps computes the scores of m-tile mt against keys
// [16·cw, 16·cw + 16) of the tile (mma over all kLatent + kRope dims, Q and K from shared memory),
// the four warps of an m-tile exchange row maxima and sums through shared memory (every warp then
// holds the same running max and sum), write P as bf16, and each accumulates O += P·V for its
// quarter of the kLatent value columns (V = the first kLatent values of the same cache rows, read
// with ldmatrix.trans). With kStages = 2 the next key tile is copied (cp.async) while the current
// one is used; with 1 it is copied after, into the same buffer: 96 KB of shared memory a block at
// DeepSeek-V2's 576-wide rows instead of 171, so an SM holds two blocks. Decode takes one stage
// where its grid is more than the GPU holds at once (many sequences: each block's chain of one
// tile's loads and sums is short, and two blocks an SM overlap them); the sums are the same.

template <int kLatent, int kRope, int kMTiles, int kStages = 2>
struct MlaMmaShape {
  static constexpr int kWidth = kLatent + kRope;
  static constexpr bool kSupported = kWidth % 16 == 0 && kLatent % 64 == 0;
  static constexpr int kStride = kWidth + 8;  // shared row stride (bf16): the 16-byte pad spreads ldmatrix rows over banks
  static constexpr int kRows = 16 * kMTiles;
  static constexpr int kKeyTile = 64;
  static constexpr int kWarps = 4 * kMTiles, kThreads = kWarps * 32;
  static constexpr int kCols = kLatent / 4;          // value columns per warp
  static constexpr int kOutTiles = kCols / 8;        // n8 tiles of O per warp
  static constexpr int kKSteps = kWidth / 16;        // k16 steps of a score
  static constexpr int kChunks = kWidth / 8;         // 16-byte chunks per row
  static constexpr int kPStride = kKeyTile + 8;
  static constexpr int kQElems = kRows * kStride, kKvElems = kKeyTile * kStride, kPElems = kRows * kPStride;
  static constexpr int kRedFloats = kMTiles * 4 * 16;  // [m-tile][key quarter][row]
  static constexpr int kSmemBytes = (kQElems + kStages * kKvElems + kPElems) * 2 + 2 * kRedFloats * 4;
  static_assert(kStages == 1 || kStages == 2, "mla_attention_mma: one or two key tile buffers");
};

// Prefill (kDecode false): grid (ceil(max_query_len · kHeads / kRows), num_seqs), last row tiles first.
// Decode: grid (ceil(kHeads / kRows), num_seqs, kMaxPartitions); a sequence of one partition is
// finished here, longer ones leave (unnormalized O, max, sum) in scratch for the merge kernel.
template <int kHeads, int kLatent, int kRope, int kPageSize, int kMTiles, bool kDecode, int kPartition,
          int kMaxPartitions, int kStages = 2>
__global__ void __launch_bounds__(MlaMmaShape<kLatent, kRope, kMTiles, kStages>::kThreads)
    mla_attention_mma_kernel(const bf16* __restrict__ q_mla, const bf16* __restrict__ cache, bf16* __restrict__ o_lat,
                             const int* __restrict__ query_start, const int* __restrict__ positions_or_context,
                             const int* __restrict__ block_tables, int max_pages_per_seq, float scale_log2,
                             float* __restrict__ scratch) {
  pdl_release_and_wait();
  using S = MlaMmaShape<kLatent, kRope, kMTiles, kStages>;
  constexpr int W = S::kWidth, ST = S::kStride, KT = S::kKeyTile, R = S::kRows, PST = S::kPStride;
  static_assert(S::kSupported, "mla_attention_mma: rows of whole k16 steps and value columns in 64s");
  static_assert(kDecode || R <= 32, "mla_attention_mma: prefill takes the block's positions from one warp");

  extern __shared__ float4 smem_f4[];
  bf16* q_s = reinterpret_cast<bf16*>(smem_f4);  // [R][ST]
  bf16* kv_s = q_s + S::kQElems;                  // [kStages][KT][ST]
  bf16* p_s = kv_s + kStages * S::kKvElems;       // [R][PST]
  float* red_max = reinterpret_cast<float*>(p_s + S::kPElems);  // [kMTiles][4][16]
  float* red_sum = red_max + S::kRedFloats;
  __shared__ int block_max_pos;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int mt = warp / 4, cw = warp % 4, g = lane / 4, q = lane % 4;
  const int seq = blockIdx.y;

  // ---- the block's rows (r < rows are real) and its keys [key_begin, key_begin + num_keys) ----
  int rows, first_row = 0, q_begin = 0, key_begin, num_keys, part = 0;
  bool single = true;
  if constexpr (kDecode) {
    part = blockIdx.z;
    const int ctx = min(positions_or_context[seq], kPartition * kMaxPartitions);
    const int part_keys = split_kv_partition_keys<kPartition, kMaxPartitions, KT>(ctx);
    key_begin = part * part_keys;
    if (part > 0 && key_begin >= ctx) return;
    num_keys = max(0, min(part_keys, ctx - key_begin));
    single = ctx <= part_keys;
    first_row = blockIdx.x * R;
    rows = min(R, kHeads - first_row);
  } else {
    q_begin = query_start[seq];
    const int total_rows = (query_start[seq + 1] - q_begin) * kHeads;
    first_row = (gridDim.x - 1 - blockIdx.x) * R;  // the longest (latest) rows start first
    if (first_row >= total_rows) return;
    rows = min(R, total_rows - first_row);
    if (warp == 0) {
      const int pos = lane < rows ? positions_or_context[q_begin + (first_row + lane) / kHeads] : -1;
      const int hi = __reduce_max_sync(0xffffffffu, pos);
      if (lane == 0) block_max_pos = hi;
    }
    __syncthreads();
    key_begin = 0;
    num_keys = block_max_pos + 1;
  }
  // Decode rows are heads first_row + r of token `seq`; prefill rows are flat (token, head) indices.
  auto row_q = [&](int r) -> long long {
    if constexpr (kDecode) return static_cast<long long>(seq) * kHeads + first_row + r;
    else return static_cast<long long>(q_begin) * kHeads + first_row + r;  // (t · kHeads + head)
  };

  // This thread's two rows (g and g + 8 of its m-tile) for the causal mask.
  int row_pos[2] = {0x7fffffff, 0x7fffffff};
  if constexpr (!kDecode) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = mt * 16 + g + i * 8;
      row_pos[i] = r < rows ? positions_or_context[q_begin + (first_row + r) / kHeads] : num_keys - 1;
    }
  }

  const int* pages = block_tables + static_cast<long long>(seq) * max_pages_per_seq;
  // Warp w copies key rows w, w + kWarps, ... of a tile: its lanes look those rows' pages up
  // together (one page-table read per row, not per 16-byte chunk), then each row's chunks go
  // lane by lane. Rows past the keys are zero-filled: 0 · garbage could be NaN.
  auto load_kv = [&](int tile, bf16* dst) {
    constexpr int kRowsPerWarp = KT / S::kWarps;
    static_assert(KT % S::kWarps == 0 && kRowsPerWarp <= 32, "mla_attention_mma: a warp looks up its rows at once");
    long long my_row = -1;  // element offset of key row warp + kWarps · lane, -1 past the keys
    if (lane < kRowsPerWarp) {
      const int key = tile * KT + warp + S::kWarps * lane;  // relative to key_begin
      if (key < num_keys) {
        const int pos = key_begin + key;
        my_row = LatentLayout{W}.row(static_cast<long long>(pages[pos / kPageSize]) * kPageSize + pos % kPageSize);
      }
    }
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const long long row = __shfl_sync(0xffffffffu, my_row, i);
      const bf16* src = cache + (row < 0 ? 0 : row);
      bf16* dst_row = dst + (warp + S::kWarps * i) * ST;
#pragma unroll
      for (int c = lane; c < S::kChunks; c += 32) cp_async_16(dst_row + c * 8, src + c * 8, row >= 0);
    }
  };
  for (int c = tid; c < R * S::kChunks; c += S::kThreads) {
    const int r = c / S::kChunks, col = (c % S::kChunks) * 8;
    const bool valid = r < rows;
    cp_async_16(q_s + r * ST + col, valid ? q_mla + row_q(r) * W + col : q_mla, valid);
  }
  const int num_tiles = ceil_div(num_keys, KT);
  if (num_tiles > 0) load_kv(0, kv_s);
  cp_async_commit();

  float o[S::kOutTiles][4];
#pragma unroll
  for (int dt = 0; dt < S::kOutTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dt][e] = 0.0f;
  float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f};

  const bf16* q_frag = q_s + (mt * 16 + ((lane / 8) % 2) * 8 + lane % 8) * ST + (lane / 16) * 8;
  const bf16* p_frag = p_s + (mt * 16 + ((lane / 8) % 2) * 8 + lane % 8) * PST + (lane / 16) * 8;
  float* my_max = red_max + (mt * 4 + cw) * 16;
  float* my_sum = red_sum + (mt * 4 + cw) * 16;

  for (int j = 0; j < num_tiles; ++j) {
    cp_async_wait<0>();
    __syncthreads();  // tile j has landed everywhere; everyone is done with tile j - 1
    if (kStages == 2 && j + 1 < num_tiles) load_kv(j + 1, kv_s + ((j + 1) % 2) * S::kKvElems);
    cp_async_commit();
    const bf16* kv = kv_s + (kStages == 2 ? (j % 2) * S::kKvElems : 0);

    // ---- scores of 16 rows × this warp's 16 keys ----
    // Even and odd k16 steps accumulate apart (two chains of dependent mmas, not one), then add.
    float s[2][4], s_odd[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = s_odd[nt][e] = 0.0f;
    const bf16* k_frag = kv + (cw * 16 + (lane / 16) * 8 + lane % 8) * ST + ((lane / 8) % 2) * 8;
    auto score_step = [&](int kk, float (&acc)[2][4]) {
      unsigned a[4], b[4];
      ldmatrix_x4(a, q_frag + kk * 16);
      ldmatrix_x4(b, k_frag + kk * 16);
      const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
      mma_bf16_16816(acc[0], a, b0);
      mma_bf16_16816(acc[1], a, b1);
    };
#pragma unroll 3
    for (int kk = 0; kk + 1 < S::kKSteps; kk += 2) {
      score_step(kk, s);
      score_step(kk + 1, s_odd);
    }
    if constexpr (S::kKSteps % 2 == 1) score_step(S::kKSteps - 1, s);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] += s_odd[nt][e];

    // ---- online softmax: the m-tile's four warps agree on the row maxima and sums ----
    float tile_max[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = j * KT + cw * 16 + nt * 8 + 2 * q + (e & 1);
        const bool valid = key < num_keys && key_begin + key <= row_pos[e / 2];
        const float v = valid ? s[nt][e] * scale_log2 : neg_inf();
        s[nt][e] = v;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], v);
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
    }
    if (q == 0) {
      my_max[g] = tile_max[0];
      my_max[g + 8] = tile_max[1];
    }
    __syncthreads();
    float correction[2], m_use[2], row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float tm = neg_inf();
#pragma unroll
      for (int w = 0; w < 4; ++w) tm = fmaxf(tm, red_max[(mt * 4 + w) * 16 + g + i * 8]);
      const float m_new = fmaxf(m[i], tm);
      m_use[i] = m_new == neg_inf() ? 0.0f : m_new;  // a row with no key yet stays at zero
      correction[i] = exp2f(m[i] - m_use[i]);
      m[i] = m_new;
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - m_use[e / 2]);
        row_sum[e / 2] += s[nt][e];
      }
      bf16* p_row = p_s + (mt * 16 + g) * PST + cw * 16 + nt * 8 + 2 * q;
      *reinterpret_cast<unsigned*>(p_row) = pack_bf16x2(s[nt][0], s[nt][1]);
      *reinterpret_cast<unsigned*>(p_row + 8 * PST) = pack_bf16x2(s[nt][2], s[nt][3]);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      row_sum[i] += __shfl_xor_sync(0xffffffffu, row_sum[i], 1);
      row_sum[i] += __shfl_xor_sync(0xffffffffu, row_sum[i], 2);
    }
    if (q == 0) {
      my_sum[g] = row_sum[0];
      my_sum[g + 8] = row_sum[1];
    }
#pragma unroll
    for (int dt = 0; dt < S::kOutTiles; ++dt) {
      o[dt][0] *= correction[0];
      o[dt][1] *= correction[0];
      o[dt][2] *= correction[1];
      o[dt][3] *= correction[1];
    }
    __syncthreads();  // P and the sums of all four warps are in place
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float ts = 0.0f;
#pragma unroll
      for (int w = 0; w < 4; ++w) ts += red_sum[(mt * 4 + w) * 16 + g + i * 8];
      l[i] = l[i] * correction[i] + ts;
    }

    // ---- O[:, this warp's columns] += P · V ----
#pragma unroll
    for (int kk = 0; kk < KT / 16; ++kk) {
      unsigned a[4];
      ldmatrix_x4(a, p_frag + kk * 16);
      const bf16* v_frag = kv + (kk * 16 + ((lane / 8) % 2) * 8 + lane % 8) * ST + cw * S::kCols + (lane / 16) * 8;
#pragma unroll
      for (int dt2 = 0; dt2 < S::kOutTiles / 2; ++dt2) {
        unsigned b[4];
        ldmatrix_x4_trans(b, v_frag + dt2 * 16);
        const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
        mma_bf16_16816(o[2 * dt2], a, b0);
        mma_bf16_16816(o[2 * dt2 + 1], a, b1);
      }
    }
    if (kStages == 1 && j + 1 < num_tiles) {  // (num_tiles is the block's: the barrier is uniform)
      __syncthreads();  // every warp is done with tile j's values
      load_kv(j + 1, kv_s);
      cp_async_commit();
    }
  }
  cp_async_wait<0>();

  // ---- O / l, or the partition's partials ----
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = mt * 16 + g + i * 8;
    if (r >= rows) continue;
    const long long row = row_q(r);
    if (single) {
      const float inv_l = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
      bf16* dst = o_lat + row * kLatent + cw * S::kCols + 2 * q;
#pragma unroll
      for (int dt = 0; dt < S::kOutTiles; ++dt) {
        *reinterpret_cast<unsigned*>(dst + dt * 8) = pack_bf16x2(o[dt][2 * i] * inv_l, o[dt][2 * i + 1] * inv_l);
      }
    } else {
      // row = seq · kHeads + head; slot of (seq, head, part): [kLatent] unnormalized O, max, sum.
      float* slot = split_kv_slot(scratch, row, part, kMaxPartitions, kLatent);
#pragma unroll
      for (int dt = 0; dt < S::kOutTiles; ++dt) {
        *reinterpret_cast<float2*>(slot + cw * S::kCols + dt * 8 + 2 * q) = make_float2(o[dt][2 * i], o[dt][2 * i + 1]);
      }
      if (cw == 0 && q == 0) {
        slot[kLatent] = m[i];
        slot[kLatent + 1] = l[i];
      }
    }
  }
}

}  // namespace detail

// q_mla [T, heads, latent + rope] -> o_lat [T, heads, latent]. Token t of sequence s (rows
// [query_start[s], query_start[s+1])) attends to key positions 0..positions[t] of s, found through
// block_tables[s · max_pages_per_seq + pos / page_size]; the step's own latents are already cached.
template <shape::mla_attention S>
void mla_attention_prefill(const bf16* q_mla, const bf16* cache, bf16* o_lat, const int* query_start,
                           const int* positions, const int* block_tables, int max_pages_per_seq, int num_seqs,
                           int max_query_len, cudaStream_t stream) {
  constexpr int kHeads = S.heads, kLatent = S.latent, kRope = S.rope, kPageSize = S.page_size;
  static_assert(kHeads > 0 && kLatent > 0 && kRope >= 0 && kPageSize > 0, "mla_attention_prefill: sizes must be positive");
  if (num_seqs <= 0 || max_query_len <= 0) return;
  const long long rows = static_cast<long long>(max_query_len) * kHeads;
  if constexpr (detail::MlaMmaShape<kLatent, kRope, 2>::kSupported) {
    using Shape = detail::MlaMmaShape<kLatent, kRope, 2>;
    constexpr auto kernel = detail::mla_attention_mma_kernel<kHeads, kLatent, kRope, kPageSize, 2, false, 1, 1>;
    detail::allow_dynamic_smem_once<kernel, Shape::kSmemBytes>();
    const dim3 grid(static_cast<unsigned>(detail::ceil_div_ll(rows, Shape::kRows)), num_seqs);
    KILN_LAUNCH(kernel, grid, Shape::kThreads, Shape::kSmemBytes, stream, q_mla, cache, o_lat, query_start, positions,
                block_tables, max_pages_per_seq, S.scale * detail::kLog2e, nullptr);
  } else {
    const dim3 grid(static_cast<unsigned>(detail::ceil_div_ll(rows, detail::kWarpRowsPerBlock)), num_seqs);
    auto kernel = detail::mla_attention_warp_kernel<kHeads, kLatent, kRope, kPageSize, false>;
    KILN_LAUNCH(kernel, grid, detail::kWarpRowThreads, 0, stream, q_mla, cache, o_lat, query_start, positions, block_tables,
                max_pages_per_seq, 0, S.scale * detail::kLog2e);
  }
}

// Decode scratch a batch of max_batch sequences needs (the generator's kDecodeScratchFloats).
template <shape::mla_attention S>
constexpr long long mla_attention_decode_scratch_floats(int max_batch) {
  return split_kv_scratch_floats(static_cast<long long>(max_batch) * S.heads, S.max_partitions, S.latent);
}

// One query row per sequence (row s of q_mla) over its context_len[s] cached keys, its 64-key
// tiles dealt over at most max_partitions partitions (split_kv_partition_keys; FlashDecoding)
// merged through scratch (mla_attention_decode_scratch_floats). Contexts longer than
// max_partitions · partition (the model's max context) are cut there. The grid depends on
// num_seqs only (CUDA-graph replay).
template <shape::mla_attention S>
void mla_attention_decode(const bf16* q_mla, const bf16* cache, bf16* o_lat, const int* context_len,
                          const int* block_tables, int max_pages_per_seq, int num_seqs, float* scratch,
                          cudaStream_t stream) {
  constexpr int kHeads = S.heads, kLatent = S.latent, kRope = S.rope, kPageSize = S.page_size;
  constexpr int kPartition = S.partition, kMaxPartitions = S.max_partitions;
  static_assert(kHeads > 0 && kLatent > 0 && kRope >= 0 && kPageSize > 0 && kPartition > 0 && kMaxPartitions > 0,
                "mla_attention_decode: sizes must be positive");
  if (num_seqs <= 0) return;
  // One m-tile holds up to 16 heads; wider models take 32 heads per block (4 blocks for 128 heads).
  constexpr int kMTiles = kHeads <= 16 ? 1 : 2;
  if constexpr (detail::MlaMmaShape<kLatent, kRope, kMTiles>::kSupported) {
    using Shape = detail::MlaMmaShape<kLatent, kRope, kMTiles>;
    using OneStage = detail::MlaMmaShape<kLatent, kRope, kMTiles, 1>;
    constexpr auto kernel =
        detail::mla_attention_mma_kernel<kHeads, kLatent, kRope, kPageSize, kMTiles, true, kPartition, kMaxPartitions>;
    constexpr auto one_stage =
        detail::mla_attention_mma_kernel<kHeads, kLatent, kRope, kPageSize, kMTiles, true, kPartition, kMaxPartitions, 1>;
    detail::allow_dynamic_smem_once<kernel, Shape::kSmemBytes>();
    detail::allow_dynamic_smem_once<one_stage, OneStage::kSmemBytes>();
    const dim3 grid(detail::ceil_div(kHeads, Shape::kRows), num_seqs, kMaxPartitions);
    // Two stages while the GPU holds the whole grid at once (resident 0: unknown, as under NVRTC).
    const int resident = detail::device_resident_blocks<kernel, Shape::kThreads, Shape::kSmemBytes>();
    const bool two_stages = resident == 0 || static_cast<long long>(grid.x) * grid.y * grid.z <= resident;
    KILN_LAUNCH(two_stages ? kernel : one_stage, grid, Shape::kThreads,
                two_stages ? Shape::kSmemBytes : OneStage::kSmemBytes, stream, q_mla, cache, o_lat, nullptr,
                context_len, block_tables, max_pages_per_seq, S.scale * detail::kLog2e, scratch);
    detail::launch_split_kv_merge<kHeads, kLatent, kPartition, kMaxPartitions, Shape::kKeyTile>(scratch, context_len,
                                                                                               o_lat, num_seqs, stream);
  } else {
    (void)scratch;
    const dim3 grid(detail::ceil_div(kHeads, detail::kWarpRowsPerBlock), num_seqs);
    auto kernel = detail::mla_attention_warp_kernel<kHeads, kLatent, kRope, kPageSize, true>;
    KILN_LAUNCH(kernel, grid, detail::kWarpRowThreads, 0, stream, q_mla, cache, o_lat, nullptr, context_len, block_tables,
                max_pages_per_seq, kPartition * kMaxPartitions, S.scale * detail::kLog2e);
  }
}

}  // namespace kiln
