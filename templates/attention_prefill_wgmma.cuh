// Prefill attention on Hopper's warpgroup tensor cores (wgmma, sm_90a), for head dims 64 and 128
// (and MLA's expanded q·k of 192 with v of 128):
// attention_prefill_mma.cuh's algorithm (same rows, same masking, the same online softmax in base
// 2) with each product issued by a warpgroup, its B operand read from shared memory.
//
// A block takes one KV head and 128 rows (token, query head of the group), token-major as in the
// mma.sync kernel, in two warpgroups of 64 rows; both multiply against the same K and V tiles, so
// a tile copied from L2 serves 128 rows. Per tile j, each warpgroup
//   - S = Q·Kᵀ: head_dim / 16 wgmmas m64nNk16 (N keys a tile), Q from registers (loaded once);
//   - O += P·V of tile j - 1 right behind it: N / 16 wgmmas m64n{head_dim}k16, V read MN-major
//     (blocks/wgmma.cuh), P the previous tile's scores rounded to bf16 (S's accumulators are
//     P's A fragments);
//   - the online softmax of tile j's scores while the tensor cores still run that P·V, then O's
//     rescale and P's packing once it has landed.
// K and V tiles come through three stages of shared memory in the 128-byte swizzle wgmma reads,
// copied with cp.async from a key/value source (blocks/prefill_kv.cuh; from the paged cache a
// thread copies the same chunk of every 16th or 32nd key, one page lookup a key), tile j + 1's
// copies in flight during tile j. Each stage has two mbarriers (its copies have landed; all warps
// are done with it) in place of block-wide barriers, so the warpgroups are not held in step
// (load_next says why that pays).
#pragma once

#include "templates/blocks/fp8_quantize.cuh"
#include "templates/blocks/mma.cuh"
#include "templates/blocks/prefill_kv.cuh"
#include "templates/blocks/prefill_rows.cuh"
#include "templates/blocks/wgmma.cuh"
#include "templates/common.cuh"

namespace kiln::detail {

// kHeadDim: the width of q and k; kVDim: of v and the output.
template <int kHeads, int kKvHeads, int kHeadDim, int kVDim = kHeadDim>
struct WgmmaPrefillShape {
  static constexpr bool kSupported =
      (kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 192) && (kVDim == 64 || kVDim == 128);
  static constexpr int kGroup = kHeads / kKvHeads;
  static constexpr int kWarpGroups = 2;
  static constexpr int kBlockM = 64 * kWarpGroups;  // rows (token, head) per block
  // Keys per tile, and whether the next tile's copies are issued before this tile's products or
  // after them: measured on an H100 with block-wide barriers in place of the mbarriers
  // (bench_kernels --prefill-only, 32 heads over 8, causal, TFLOP/s at 8,192 / 32,768 tokens;
  // bench/RESULTS.md 2026-11-28): head dim 128 with 128 keys, copies after 380 / 409 (copies first
  // 365 / 388; 64 keys 358 / 383); head dim 64 at 8,192 with 64 keys, copies first 364 (after 275;
  // 128 keys 272-284). A head dim of 64 multiplies for half as long, so copies issued between the
  // products and the softmax delay it. MLA's 192 / 128 take 64 keys: three stages of 128 fit no more.
  static constexpr int kBlockN = kHeadDim == 128 && kVDim == 128 ? 128 : 64;
  static constexpr bool kCopiesFirst = kHeadDim == 64;
  static constexpr int kThreads = 128 * kWarpGroups;
  static constexpr int kStages = 3;  // tile j + 1 lands while tile j's scores and tile j - 1's values multiply
  static constexpr int kChunksPerRow = kHeadDim / 8;                  // 16-byte chunks of a q or k row
  static constexpr int kVChunksPerRow = kVDim / 8;                    // of a v row
  static constexpr int kKTileBytes = kBlockN * kHeadDim * 2;
  static constexpr int kStageBytes = kKTileBytes + kBlockN * kVDim * 2;  // K, then V
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kQStages = ceil_div(kQBytes, kStageBytes);     // Q passes through the last stages
  static constexpr int kSmemBytes = kStages * kStageBytes + kSwizzleGroupBytes;  // + room to align
  static constexpr int kKSteps = kHeadDim / 16;  // k16 steps of Q·Kᵀ
  static constexpr int kKeySteps = kBlockN / 16;  // k16 steps of P·V
};

// out [T, kHeads · kVDim]; Kv: a source of blocks/prefill_kv.cuh. Where `out_fp8` is given (kVDim
// of 128: a head's values are one block of the FP8 inputs' 128 columns), the rows go out as the FP8
// GEMM's inputs (templates/fp8_rows.hpp, `padded` rows of scales) in place of `out`, from the same
// bf16 values; their padding rows are not this kernel's.
template <int kHeads, int kKvHeads, int kHeadDim, int kVDim, int kRow, class Kv>
__global__ void __launch_bounds__(WgmmaPrefillShape<kHeads, kKvHeads, kHeadDim, kVDim>::kThreads, 1)
    attention_prefill_wgmma_kernel(const bf16* __restrict__ q_rows, Kv kv, bf16* __restrict__ out,
                                   const int* __restrict__ query_start, const int* __restrict__ positions,
                                   float scale_log2, bool heads_inner, Fp8Rows out_fp8, int padded) {
  pdl_release_and_wait();
  using Shape = WgmmaPrefillShape<kHeads, kKvHeads, kHeadDim, kVDim>;
  static_assert(Shape::kSupported, "wgmma prefill: head dim 64, 128 or 192, value dim 64 or 128");
  static_assert(Shape::kQStages < Shape::kStages, "wgmma prefill: Q must leave stage 0 to tile 0");
  constexpr int G = Shape::kGroup, D = kHeadDim, BM = Shape::kBlockM, BN = Shape::kBlockN;
  constexpr int CPR = Shape::kChunksPerRow, VCPR = Shape::kVChunksPerRow;

  const PrefillTile block = prefill_tile<kKvHeads>(heads_inner);
  const int seq = block.seq, kv_head = block.kv_head, tile = block.tile;
  kv.bind(seq);
  const int q_begin = query_start[seq];
  const int rows = (query_start[seq + 1] - q_begin) * G;
  if (tile * BM >= rows) return;

  extern __shared__ float4 smem_f4[];
  // The swizzle pattern repeats every 1024 bytes of address: the stages start on such a boundary.
  char* stages = reinterpret_cast<char*>(
      (reinterpret_cast<unsigned long long>(smem_f4) + kSwizzleGroupBytes - 1) & ~(kSwizzleGroupBytes - 1ull));
  __shared__ int bounds[2 * BM / 32];  // prefill_block_bounds's
  // Per stage: its tile's copies have landed (every thread's); both warpgroups are done with it.
  // (The barrier in prefill_block_bounds publishes their initialization.)
  __shared__ unsigned long long full[Shape::kStages], empty[Shape::kStages];
  if (threadIdx.x == 0) {
    for (int i = 0; i < Shape::kStages; ++i) {
      mbarrier_init(&full[i], Shape::kThreads);
      mbarrier_init(&empty[i], Shape::kThreads / 32);
    }
  }

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, q = lane % 4;

  // The block's key range and where the mask can start; this thread's rows' positions.
  int max_pos, min_pos;
  prefill_block_bounds<BM, G>(positions, q_begin, rows, tile, bounds, max_pos, min_pos);
  const int num_keys = max_pos + 1;
  const int num_tiles = ceil_div(num_keys, BN);
  int row_pos[2];
  prefill_row_positions<G>(positions, q_begin, rows, tile * BM + warp * 16 + g, max_pos, row_pos);

  // Keys and values are zero-filled past the end (0 · garbage could be NaN), a chunk there copying
  // nothing from key 0's address: no branch around the address computation. Rows of equal widths
  // (dense attention): a thread copies the same 16-byte chunk of every kRowStep-th key of a tile,
  // for K and for V, with one source lookup a key and one swizzled offset (kRowStep is a multiple of
  // 8, the swizzle's period). Otherwise K's and V's chunks go in turn over the threads.
  constexpr bool kSameRows = CPR == VCPR && Shape::kThreads % CPR == 0;
  constexpr int kRowStep = kSameRows ? Shape::kThreads / CPR : 8;
  static_assert(!kSameRows || (kRowStep % 8 == 0 && BN % kRowStep == 0), "wgmma prefill: whole swizzle periods a pass");
  const int my_chunk = tid % CPR, my_row = tid / CPR;
  const int my_offset = swizzled_offset(BN, my_row, my_chunk);
  auto load_kv = [&](int key_tile, char* stage) {
    if constexpr (kSameRows) {
#pragma unroll
      for (int r = 0; r < BN; r += kRowStep) {
        const int key = key_tile * BN + my_row + r;
        const bool valid = key < num_keys;
        const bf16 *k_src, *v_src;
        kv.key_value(kv_head, valid ? key : 0, my_chunk * 8, k_src, v_src);
        cp_async_16(stage + my_offset + r * kSwizzleRowBytes, k_src, valid);
        cp_async_16(stage + Shape::kKTileBytes + my_offset + r * kSwizzleRowBytes, v_src, valid);
      }
    } else {
#pragma unroll
      for (int c = tid; c < BN * CPR; c += Shape::kThreads) {
        const int row = c / CPR, chunk = c % CPR, key = key_tile * BN + row;
        const bool valid = key < num_keys;
        cp_async_16(stage + swizzled_offset(BN, row, chunk), kv.key(kv_head, valid ? key : 0, chunk * 8), valid);
      }
#pragma unroll
      for (int c = tid; c < BN * VCPR; c += Shape::kThreads) {
        const int row = c / VCPR, chunk = c % VCPR, key = key_tile * BN + row;
        const bool valid = key < num_keys;
        cp_async_16(stage + Shape::kKTileBytes + swizzled_offset(BN, row, chunk),
                    kv.value(kv_head, valid ? key : 0, chunk * 8), valid);
      }
    }
  };
  auto stage = [&](int t) { return stages + (t % Shape::kStages) * Shape::kStageBytes; };
  // Tile t's copies: into its stage once all 8 warps are done with tile t - 3 there; every thread's
  // part arrives on the stage's `full` barrier when it lands, so that the stage's barriers complete
  // one phase per tile (phase t / kStages). No block-wide barrier: a warpgroup waits only for the
  // copies it reads and the stage it overwrites, so the two drift apart and one's softmax runs
  // while the other's products keep the tensor cores busy.
  auto load_next = [&](int t) {
    if (t >= num_tiles) return;
    if (t >= Shape::kStages) mbarrier_wait(&empty[t % Shape::kStages], (t / Shape::kStages - 1) & 1);
    load_kv(t, stage(t));
    cp_async_arrive(&full[t % Shape::kStages]);
  };

  // Q of the block's rows, through the last stages (swizzled, so that ldmatrix's rows spread over
  // the banks), into registers; tile 0 into stage 0 meanwhile.
  char* q_stage = stages + (Shape::kStages - Shape::kQStages) * Shape::kStageBytes;
  for (int c = tid; c < BM * CPR; c += Shape::kThreads) {
    const int r = c / CPR, chunk = c % CPR;
    const int row = tile * BM + r;
    const bool valid = row < rows;
    const bf16* src = valid ? q_rows + static_cast<long long>(q_begin + row / G) * kRow + (kv_head * G + row % G) * D +
                                  chunk * 8
                            : q_rows;
    cp_async_16(q_stage + swizzled_offset(BM, r, chunk), src, valid);
  }
  load_next(0);
  cp_async_commit();
  cp_async_wait<0>();
  fence_proxy_async_shared();
  __syncthreads();
  unsigned qf[Shape::kKSteps][4];
#pragma unroll
  for (int kk = 0; kk < Shape::kKSteps; ++kk) {
    const int r = warp * 16 + ((lane / 8) % 2) * 8 + lane % 8, chunk = kk * 2 + lane / 16;
    ldmatrix_x4(qf[kk], q_stage + swizzled_offset(BM, r, chunk));
  }
  __syncthreads();  // the stages of Q are free for tiles 1 and 2
  load_next(1);

  float o[kVDim / 2];
#pragma unroll
  for (int i = 0; i < kVDim / 2; ++i) o[i] = 0.0f;
  float s[BN / 2];
  float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f};
  unsigned p[Shape::kKeySteps][4];  // P of the last tile softmaxed: bf16 A fragments of P·V

  // Descriptors of stage 0's K and V tiles; stage j and step kk are byte offsets from them.
  const unsigned long long k_descriptor = k_major_descriptor(stages);
  const unsigned long long v_descriptor = mn_major_descriptor(stages + Shape::kKTileBytes, BN);
  // S = Q·Kᵀ for the keys of the tile in stage `at`, issued (committed, not waited for).
  auto issue_scores = [&](int at) {
#pragma unroll
    for (int kk = 0; kk < Shape::kKSteps; ++kk) {
      wgmma_bf16<BN, 0>(s, qf[kk], descriptor_plus(k_descriptor, at * Shape::kStageBytes + k_major_step_bytes(BN, kk)),
                        kk > 0);
    }
    wgmma_commit();
  };
  // O += P·V for the tile in stage `at`, issued.
  auto issue_values = [&](int at) {
#pragma unroll
    for (int kk = 0; kk < Shape::kKeySteps; ++kk) {
      wgmma_bf16<kVDim, 1>(o, p[kk], descriptor_plus(v_descriptor, at * Shape::kStageBytes + mn_major_step_bytes(kk)),
                           1);
    }
    wgmma_commit();
  };
  // The online softmax of tile j's scores in s: masks, updates m and l (in log2 units: scores times
  // scale_log2), leaves exp2(s · scale_log2 - m) in s, and returns in `correction` the factor O's
  // rows take (applied once the P·V in flight has landed).
  auto softmax = [&](int j, float (&correction)[2]) {
    if (j * BN + BN - 1 > min_pos) {  // the tile reaches past some row's position
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) {
        const int key = j * BN + (i / 4) * 8 + 2 * q + (i & 1);
        if (key > row_pos[(i % 4) / 2]) s[i] = neg_inf();
      }
    }
    float tile_max[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) tile_max[(i % 4) / 2] = fmaxf(tile_max[(i % 4) / 2], s[i]);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
      const float m_new = fmaxf(m[i], tile_max[i] * scale_log2);  // scale_log2 > 0: the max of the scaled
      const float m_use = m_new == neg_inf() ? 0.0f : m_new;  // a row with no key yet stays at zero
      correction[i] = exp2_approx(m[i] - m_use);
      m[i] = m_new;
      tile_max[i] = m_use;
    }
    float row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) {
      s[i] = exp2_approx(fmaf(s[i], scale_log2, -tile_max[(i % 4) / 2]));
      row_sum[(i % 4) / 2] += s[i];
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) l[i] = l[i] * correction[i] + row_sum[i];
  };
  // O's rows times the correction (skipped where no row of the warp has a new maximum: most tiles
  // past the first few), and P from s (after the P·V that read the previous P).
  auto rescale_and_pack = [&](const float (&correction)[2]) {
    if (__any_sync(0xffffffffu, correction[0] != 1.0f || correction[1] != 1.0f)) {
#pragma unroll
      for (int i = 0; i < kVDim / 2; ++i) o[i] *= correction[(i % 4) / 2];
    }
#pragma unroll
    for (int kk = 0; kk < Shape::kKeySteps; ++kk) {
      p[kk][0] = pack_bf16x2(s[8 * kk + 0], s[8 * kk + 1]);
      p[kk][1] = pack_bf16x2(s[8 * kk + 2], s[8 * kk + 3]);
      p[kk][2] = pack_bf16x2(s[8 * kk + 4], s[8 * kk + 5]);
      p[kk][3] = pack_bf16x2(s[8 * kk + 6], s[8 * kk + 7]);
    }
  };

  // Tile 0's scores alone; then, per tile j, its scores beside tile j - 1's P·V: the softmax of
  // tile j runs while the tensor cores still multiply tile j - 1's values.
  float correction[2];
  wgmma_fence();
  issue_scores(0);
  wgmma_wait<0>();
  wgmma_fence_registers(s);
  softmax(0, correction);
  rescale_and_pack(correction);
  for (int j = 1; j < num_tiles; ++j) {
    mbarrier_wait(&full[j % Shape::kStages], (j / Shape::kStages) & 1);  // every thread's copies of tile j
    fence_proxy_async_shared();
    if constexpr (Shape::kCopiesFirst) load_next(j + 1);
    wgmma_fence();
    issue_scores(j % Shape::kStages);
    issue_values((j - 1) % Shape::kStages);
    if constexpr (!Shape::kCopiesFirst) load_next(j + 1);
    wgmma_wait<1>();  // the scores (the P·V may still run)
    wgmma_fence_registers(s);
    softmax(j, correction);
    wgmma_wait<0>();
    wgmma_fence_registers(o);
    if (lane == 0) mbarrier_arrive(&empty[(j - 1) % Shape::kStages]);  // this warp is done with tile j - 1
    rescale_and_pack(correction);
  }
  wgmma_fence();
  issue_values((num_tiles - 1) % Shape::kStages);
  wgmma_wait<0>();
  wgmma_fence_registers(o);

  // ---- O / l, rounded once ----
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    const float inv_l = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    const int row = tile * BM + warp * 16 + g + i * 8;
    if constexpr (kVDim == kFp8InputBlock) {
      if (out_fp8) {  // the same for the whole block
        // A row's 128 values lie in its quad's 4 lanes (32 each: columns 8·dt + 2q, + 1): their
        // largest magnitude over the quad is the block's (every lane shuffles, past the rows too).
        float v[kVDim / 4];
        float amax = 0.0f;
#pragma unroll
        for (int dt = 0; dt < kVDim / 8; ++dt) {
          v[2 * dt] = o[4 * dt + 2 * i] * inv_l;
          v[2 * dt + 1] = o[4 * dt + 2 * i + 1] * inv_l;
        }
        round_to_bf16<kVDim / 4>(v);
#pragma unroll
        for (int j = 0; j < kVDim / 4; ++j) amax = fmaxf(amax, fabsf(v[j]));
        const float scale = fp8_input_scale(fp8_block_amax<4>(amax));
        if (row < rows) {
          const long long t = q_begin + row / G;
          const int head = kv_head * G + row % G;
          unsigned char* dst = out_fp8.codes + t * kHeads * kVDim + head * kVDim + 2 * q;
          const float inverse = __frcp_rn(scale);
#pragma unroll
          for (int dt = 0; dt < kVDim / 8; ++dt) {
            *reinterpret_cast<unsigned short*>(dst + dt * 8) =
                static_cast<unsigned short>(fp8_code_pair(v[2 * dt], v[2 * dt + 1], inverse));
          }
          if (q == 0) out_fp8.scales[static_cast<long long>(head) * padded + t] = scale;
        }
        continue;
      }
    }
    if (row < rows) {
      const long long t = q_begin + row / G;
      bf16* dst = out + t * kHeads * kVDim + (kv_head * G + row % G) * kVDim + 2 * q;
#pragma unroll
      for (int dt = 0; dt < kVDim / 8; ++dt) {
        const unsigned packed = pack_bf16x2(o[4 * dt + 2 * i] * inv_l, o[4 * dt + 2 * i + 1] * inv_l);
        *reinterpret_cast<unsigned*>(dst + dt * 8) = packed;
      }
    }
  }
}

// The launch: one block per 128 (token, head) rows of a sequence and KV head. `out_fp8` (kVDim of
// 128 only): the FP8 inputs of `padded` rows instead of `out` (the kernel's comment).
template <int kHeads, int kKvHeads, int kHeadDim, int kVDim, int kRow, class Kv>
void launch_prefill_wgmma(const bf16* q_rows, const Kv& kv, bf16* out, const int* query_start, const int* positions,
                          int num_seqs, int max_query_len, float scale, cudaStream_t stream, Fp8Rows out_fp8 = {},
                          int padded = 0) {
  launch_prefill_rows<attention_prefill_wgmma_kernel<kHeads, kKvHeads, kHeadDim, kVDim, kRow, Kv>,
                      WgmmaPrefillShape<kHeads, kKvHeads, kHeadDim, kVDim>, kKvHeads>(
      q_rows, kv, out, query_start, positions, num_seqs, max_query_len, scale, stream, out_fp8, padded);
}

}  // namespace kiln::detail
