// DeepSeekMoE routed experts (ref::moe_route, ref::moe_gate_up, ref::moe_down).
//
// moe_route    one warp per token: softmax, optional group limit, greedy top-k, weights.
// moe_gate_up  first buckets the (token, slot) pairs by expert into `scratch` (one block, stable:
//              pairs of a bucket stay in ascending order), then multiplies each used expert's
//              gate | up rows with the rows of the tokens that chose it:
//                T <= 64   streaming kernel: a block takes 16·kWarpsN rows of one used expert and
//                          the pairs of that expert (passes of 8 or 16), so each chosen expert is
//                          read from DRAM once per call;
//                larger T  grouped tensor-core GEMM over (expert, 64-pair tile, 128-row tile).
// moe_down     reuses the buckets:
//                T <= 64   a block owns 16 rows of the output and goes over every used expert,
//                          summing weight · (W_e · act) per token in shared memory in a fixed
//                          order: each expert is read from DRAM once and the result is
//                          deterministic;
//                larger T  the grouped GEMM, adding into x with fp32 atomics (order not fixed).
// Shapes whose rows cannot be read 16 bytes at a time (the tiny test models) take the streaming
// kernels at every T: the gate_up one loops over 64-pair passes, the down one over 64-token windows.
//
// Scratch (ints): [0, kExperts] bucket offsets, then the T·kTopK pair indices (t·kTopK + j)
// sorted by expert: kExperts + 1 + T·kTopK ints.
//
// The matmul building blocks shared with mla.cuh (Rows16 streaming dot products, TileGemm) live
// here too.
#pragma once

#include "templates/common.cuh"
#include "templates/mma.cuh"

namespace kiln {

namespace detail {

// =====================================================================================
// Streaming dot products: a warp multiplies 16 weight rows with up to 8·kTT token rows on the
// tensor cores (mma.sync m16n8k16), weights read once with 16-byte streaming loads. Same scheme as
// gemv.cuh: per 32-column step a lane loads 16 bytes of rows g and g + 8 (columns 8q..8q+7) and of
// token g of each n8 tile; those 8 columns stand for its k slots of two k16 steps, the same
// permutation on both sides, so the dot products come out right.
// =====================================================================================

// acc[j] += W[rows g, g + 8] · X[token j·8 + g] over the column steps wk, wk + kWK, ... of a row of
// kK values. acc[j][c] is C of the mma: (row g, token 2q), (row g, 2q + 1), (row g + 8, 2q),
// (row g + 8, 2q + 1) of token tile j.
template <int kK, int kTT, int kWK>
struct Rows16 {
  static constexpr int kVec = vec_width(kK, 2);
  static constexpr int kSteps = ceil_div(kK, 32);
  static constexpr int kUnroll = max_int(1, 4 / kTT);  // column steps per load group

  __device__ static __forceinline__ void dot(const bf16* w0, const bf16* w1, bool ok0, bool ok1,
                                             const bf16* const (&x)[kTT], const bool (&x_ok)[kTT], int wk,
                                             float (&acc)[kTT][4]) {
    constexpr int U = kUnroll;
    const int q = threadIdx.x % 4;
    struct Group {
      uint4 a0[U], a1[U], b[U][kTT];
    };
    auto load_group = [&](int s0, Group& grp) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int step = s0 + u * kWK;
        const int col = step * 32 + q * 8;
        const bool step_ok = step < kSteps;
        grp.a0[u] = load_row_chunk<kK, kVec, true>(w0, col, step_ok && ok0);
        grp.a1[u] = load_row_chunk<kK, kVec, true>(w1, col, step_ok && ok1);
#pragma unroll
        for (int j = 0; j < kTT; ++j) grp.b[u][j] = load_row_chunk<kK, kVec, false>(x[j], col, step_ok && x_ok[j]);
      }
    };
    auto mma_group = [&](const Group& grp) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const unsigned a_lo[4] = {grp.a0[u].x, grp.a1[u].x, grp.a0[u].y, grp.a1[u].y};
        const unsigned a_hi[4] = {grp.a0[u].z, grp.a1[u].z, grp.a0[u].w, grp.a1[u].w};
#pragma unroll
        for (int j = 0; j < kTT; ++j) {
          const unsigned b_lo[2] = {grp.b[u][j].x, grp.b[u][j].y};
          const unsigned b_hi[2] = {grp.b[u][j].z, grp.b[u][j].w};
          mma_bf16_16816(acc[j], a_lo, b_lo);
          mma_bf16_16816(acc[j], a_hi, b_hi);
        }
      }
    };
    if (wk >= kSteps) return;
    Group current;
    load_group(wk, current);
    // Not unrolled: the next group's loads are issued before the current group's mmas.
#pragma unroll 1
    for (int s0 = wk; s0 < kSteps; s0 += kWK * U) {
      Group next;
      const bool more = s0 + kWK * U < kSteps;
      if (more) load_group(s0 + kWK * U, next);
      mma_group(current);
      if (more) current = next;
    }
  }
};

// Up to one streaming pass of tokens the expert kernels stream (decode); above, the grouped GEMM
// (prefill).
constexpr int kMoeStreamTokens = kStreamPassTokens;

// Two adjacent bf16 outputs (the second only when `two`), one 4-byte store when aligned.
__device__ __forceinline__ void store_bf16_pair(bf16* p, float v0, float v1, bool two) {
  if (two && (reinterpret_cast<unsigned long long>(p) & 3) == 0) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
  } else {
    p[0] = __float2bfloat16_rn(v0);
    if (two) p[1] = __float2bfloat16_rn(v1);
  }
}

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
//   static void store(const Args&, int group, int m, int n, float v0, float v1, bool two)  C[m, n], C[m, n + 1]
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
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const int n = n0 + wn * 32 + ni * 8 + 2 * q;
      if (n >= kN) continue;
      const int m = wm * 32 + mi * 16 + g;
      if (m < rows) P::store(args, group, m0 + m, n, acc[mi][ni][0], acc[mi][ni][1], n + 1 < kN);
      if (m + 8 < rows) P::store(args, group, m0 + m + 8, n, acc[mi][ni][2], acc[mi][ni][3], n + 1 < kN);
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
// Routing
// =====================================================================================

// Warp argmax over (value, index): larger value, then lower index. Every lane gets the result.
__device__ __forceinline__ void warp_argmax(float& value, int& index) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float v = __shfl_xor_sync(0xffffffffu, value, offset);
    const int i = __shfl_xor_sync(0xffffffffu, index, offset);
    if (v > value || (v == value && i < index)) {
      value = v;
      index = i;
    }
  }
}

template <int kExperts, int kTopK, int kGroups, int kTopkGroups, bool kGroupLimited, bool kNormalize>
__global__ void __launch_bounds__(128) moe_route_kernel(const float* __restrict__ logits, int* __restrict__ ids,
                                                         float* __restrict__ weights, int tokens, float scaling) {
  constexpr int kPer = ceil_div(kExperts, 32);  // experts per lane: e = lane + 32·i
  constexpr int kBig = 0x7fffffff;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long t = static_cast<long long>(blockIdx.x) * 4 + warp;
  if (t >= tokens) return;
  const float* l = logits + t * kExperts;

  // Softmax. Experts that do not exist hold -inf from here on, below every real score (>= 0).
  float s[kPer];
  float max_logit = neg_inf();
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = lane + 32 * i;
    s[i] = e < kExperts ? l[e] : neg_inf();
    max_logit = fmaxf(max_logit, s[i]);
  }
  max_logit = warp_max(max_logit);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    if (lane + 32 * i < kExperts) {
      s[i] = expf(s[i] - max_logit);
      sum += s[i];
    }
  }
  sum = warp_sum(sum);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    if (lane + 32 * i < kExperts) s[i] = s[i] / sum;
  }

  if constexpr (kGroupLimited) {
    // Keep the kTopkGroups groups with the highest max score; the others' experts score 0.
    constexpr int kPerGroup = kExperts / kGroups;
    __shared__ float group_scores[4][kExperts];  // each warp's token
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (lane + 32 * i < kExperts) group_scores[warp][lane + 32 * i] = s[i];
    }
    __syncwarp();
    float group_max = neg_inf();
    if (lane < kGroups) {
      for (int k = 0; k < kPerGroup; ++k) group_max = fmaxf(group_max, group_scores[warp][lane * kPerGroup + k]);
    }
    unsigned keep = 0;
    for (int r = 0; r < kTopkGroups; ++r) {
      float v = lane < kGroups && !((keep >> lane) & 1u) ? group_max : neg_inf();
      int idx = lane < kGroups && !((keep >> lane) & 1u) ? lane : kBig;
      warp_argmax(v, idx);
      keep |= 1u << idx;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      if (e < kExperts && !((keep >> (e / kPerGroup)) & 1u)) s[i] = 0.0f;
    }
  }

  // Greedy top-k: lane j keeps the j-th choice.
  int my_id = 0;
  float my_score = 0.0f, total = 0.0f;
  for (int r = 0; r < kTopK; ++r) {
    float v = neg_inf();
    int idx = kBig;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (s[i] > v) {  // strict: within a lane the lower index wins a tie
        v = s[i];
        idx = lane + 32 * i;
      }
    }
    warp_argmax(v, idx);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (lane + 32 * i == idx) s[i] = neg_inf();
    }
    if (lane == r) {
      my_id = idx;
      my_score = v;
    }
    total += v;  // in choice order, as the reference sums
  }
  if (lane < kTopK) {
    ids[t * kTopK + lane] = my_id;
    weights[t * kTopK + lane] = kNormalize ? my_score / (total + 1e-20f) : my_score * scaling;
  }
}

// =====================================================================================
// Bucketing: one block of 32 warps. Warp w owns a contiguous segment of the pairs; pass 1 counts
// per (warp, expert), a scan turns the counts into each warp's first slot per expert, pass 2
// places the pairs (ranks inside a warp from __match_any_sync). Stable, so deterministic.
// Pairs whose expert id is out of range are left out (their outputs are not written).
// =====================================================================================

template <int kExperts, int kTopK>
__global__ void __launch_bounds__(1024) moe_bucket_kernel(const int* __restrict__ ids, int* __restrict__ scratch,
                                                          int num_pairs) {
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
    int running = 0;
    for (int eb = 0; eb < kExperts; eb += 32) {
      const int e = eb + lane;
      int total = 0;
      if (e < kExperts) {
        for (int w = 0; w < 32; ++w) total += warp_counts[w * kExperts + e];
      }
      const int incl = warp_inclusive_sum(total);
      if (e < kExperts) {
        int next = running + incl - total;
        scratch[e] = next;
        for (int w = 0; w < 32; ++w) {
          const int c = warp_counts[w * kExperts + e];
          warp_counts[w * kExperts + e] = next;
          next += c;
        }
      }
      running += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (lane == 0) scratch[kExperts] = running;
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
      sorted[mine[e] + __popc(peers & ((1u << lane) - 1u))] = p;
    }
    __syncwarp();
    if (valid && lane == __ffs(peers) - 1) mine[e] += __popc(peers);
    __syncwarp();
  }
}

template <int kExperts, int kTopK>
inline void launch_moe_bucket(const int* ids, int* scratch, int tokens, cudaStream_t stream) {
  constexpr int kSmem = 32 * kExperts * 4;
  constexpr auto kernel = moe_bucket_kernel<kExperts, kTopK>;
  allow_dynamic_smem_once<kernel, kSmem>();
  KILN_LAUNCH(kernel, 1, 1024, kSmem, stream, ids, scratch, tokens * kTopK);
}

// =====================================================================================
// Streaming expert kernels (decode; every T for shapes without 16-byte rows)
// =====================================================================================

// Warps of a block: kWN row tiles × kWK column splits, at most 8 warps.
template <int kRows, int kK, int kTT>
struct ExpertStreamShape {
  static constexpr int kSteps = ceil_div(kK, 32);
  static constexpr int kWK = max_int(1, min_int(kTT >= 8 ? 4 : 8, kSteps / 4));  // >= 4 steps per warp
  static constexpr int kWN = max_int(1, 8 / kWK);
  static constexpr int kRowBlocks = ceil_div(ceil_div(kRows, 16), kWN);
  static constexpr int kThreads = kWN * kWK * 32;
};

// out[p, :] = weight[e] · h[p / kTopK] for every pair p of the expert at used-expert rank
// blockIdx.y, rows [16·kWN·blockIdx.x, +16·kWN) of its 2·kInter; passes of 8·kTT pairs (the
// rows of later passes come from L2).
template <int kExperts, int kTopK, int kHidden, int kInter, int kTT>
__global__ void __launch_bounds__(ExpertStreamShape<2 * kInter, kHidden, kTT>::kThreads)
    moe_gate_up_stream_kernel(const bf16* __restrict__ h, const bf16* __restrict__ weight,
                              const int* __restrict__ scratch, bf16* __restrict__ out) {
  constexpr int kRows = 2 * kInter;
  using Shape = ExpertStreamShape<kRows, kHidden, kTT>;
  constexpr int WK = Shape::kWK, WN = Shape::kWN;
  __shared__ float partial[WN * WK][128];
  const GroupTile used = locate_group_tile<kExperts>(scratch, blockIdx.y, 0x40000000);
  if (used.group < 0) return;  // fewer used experts than slots: the same answer in every warp
  const int e = used.group, count = used.rows;
  const int* pairs = expert_pairs<kExperts>(scratch, e);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wn = warp / WK, wk = warp % WK, g = lane / 4;
  const int row0 = (blockIdx.x * WN + wn) * 16 + g, row1 = row0 + 8;
  const bf16* w = weight + static_cast<long long>(e) * kRows * kHidden;
  const bf16* w0 = w + static_cast<long long>(min(row0, kRows - 1)) * kHidden;
  const bf16* w1 = w + static_cast<long long>(min(row1, kRows - 1)) * kHidden;

  for (int base = 0; base < count; base += 8 * kTT) {
    const bf16* x[kTT];
    bool x_ok[kTT];
#pragma unroll
    for (int j = 0; j < kTT; ++j) {
      const int i = base + j * 8 + g;
      x_ok[j] = i < count;
      x[j] = h + static_cast<long long>(pairs[min(i, count - 1)] / kTopK) * kHidden;
    }
    float acc[kTT][4];
#pragma unroll
    for (int j = 0; j < kTT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;
    Rows16<kHidden, kTT, WK>::dot(w0, w1, row0 < kRows, row1 < kRows, x, x_ok, wk, acc);

    // Sum the column splits in a fixed order, one token tile at a time.
#pragma unroll
    for (int j = 0; j < kTT; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) partial[warp][lane * 4 + c] = acc[j][c];
      __syncthreads();
      for (int i = threadIdx.x; i < WN * 128; i += Shape::kThreads) {
        // i -> (row tile of the block, token in the tile, row in the tile), rows fastest.
        const int tn = i / 128, token = (i / 16) % 8, r = i % 16;
        const int src_lane = (r % 8) * 4 + token / 2, src_c = (r / 8) * 2 + token % 2;
        float v = 0.0f;
#pragma unroll
        for (int k = 0; k < WK; ++k) v += partial[tn * WK + k][src_lane * 4 + src_c];
        const int row = (blockIdx.x * WN + tn) * 16 + r;
        const int pi = base + j * 8 + token;
        if (row < kRows && pi < count) out[static_cast<long long>(pairs[pi]) * kRows + row] = __float2bfloat16_rn(v);
      }
      __syncthreads();
    }
  }
}

template <int kHidden, int kInter, int kWindowTiles>
struct DownStreamShape {
  static constexpr int kSteps = ceil_div(kInter, 32);
  static constexpr int kWK = max_int(1, min_int(16, kSteps / 2));  // every warp on the block's 16 rows
  static constexpr int kThreads = kWK * 32;
  static constexpr int kWindow = 8 * kWindowTiles;                 // tokens per launch
  static constexpr int kTT = min_int(kWindowTiles, 2);             // token tiles per pass over an expert's pairs
  static constexpr int kSmemBytes = kWK * kWindow * 16 * 4;        // per-warp sums [kWK][kWindow][16]
};

// First index in sorted[0, n) whose value is >= key.
__device__ __forceinline__ int lower_bound_int(const int* sorted, int n, int key) {
  int lo = 0;
  while (n > 0) {
    const int half = n / 2;
    if (sorted[lo + half] < key) {
      lo += half + 1;
      n -= half + 1;
    } else {
      n = half;
    }
  }
  return lo;
}

// x[t, rows] += Σ_j weights[t, j] · weight[ids[t, j]][rows] · act[t, j] for tokens
// [t_begin, t_begin + t_count) (t_count <= kWindow) and the block's 16 rows. Every warp goes over
// every used expert (ascending id) for its own column steps and adds weight · partial into its own
// shared sums; the warps' sums are added in warp order at the end: deterministic.
template <int kExperts, int kTopK, int kHidden, int kInter, int kWindowTiles>
__global__ void __launch_bounds__(DownStreamShape<kHidden, kInter, kWindowTiles>::kThreads)
    moe_down_stream_kernel(const bf16* __restrict__ act, const bf16* __restrict__ weight,
                           const float* __restrict__ weights, const int* __restrict__ scratch, float* __restrict__ x,
                           int t_begin, int t_count) {
  using Shape = DownStreamShape<kHidden, kInter, kWindowTiles>;
  constexpr int WK = Shape::kWK, kWindow = Shape::kWindow, kTT = Shape::kTT;
  extern __shared__ float4 smem_f4[];
  float* sums = reinterpret_cast<float*>(smem_f4);  // [WK][kWindow][16]
  for (int i = threadIdx.x; i < WK * kWindow * 16; i += Shape::kThreads) sums[i] = 0.0f;
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int row0 = blockIdx.x * 16 + g, row1 = row0 + 8;
  const int pair_lo = t_begin * kTopK, pair_hi = (t_begin + t_count) * kTopK;
  float* my_sums = sums + warp * kWindow * 16;
  const int* sorted = scratch + kExperts + 1;

  for (int e = 0; e < kExperts; ++e) {
    const int bucket = scratch[e], bucket_size = scratch[e + 1] - bucket;
    if (bucket_size == 0) continue;
    // The window's pairs are a contiguous run of the (ascending) bucket.
    const int first = bucket + lower_bound_int(sorted + bucket, bucket_size, pair_lo);
    const int n = bucket + lower_bound_int(sorted + bucket, bucket_size, pair_hi) - first;
    if (n == 0) continue;
    const bf16* w = weight + static_cast<long long>(e) * kHidden * kInter;
    const bf16* w0 = w + static_cast<long long>(min(row0, kHidden - 1)) * kInter;
    const bf16* w1 = w + static_cast<long long>(min(row1, kHidden - 1)) * kInter;
    for (int base = 0; base < n; base += 8 * kTT) {
      const bf16* xr[kTT];
      bool x_ok[kTT];
#pragma unroll
      for (int j = 0; j < kTT; ++j) {
        const int i = base + j * 8 + g;
        x_ok[j] = i < n;
        xr[j] = act + static_cast<long long>(sorted[first + min(i, n - 1)]) * kInter;
      }
      float acc[kTT][4];
#pragma unroll
      for (int j = 0; j < kTT; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;
      Rows16<kInter, kTT, WK>::dot(w0, w1, row0 < kHidden, row1 < kHidden, xr, x_ok, warp, acc);
      // Lanes of one g and different q may hold the same token (repeated ids): one q at a time.
      for (int qq = 0; qq < 4; ++qq) {
        if (q == qq) {
#pragma unroll
          for (int j = 0; j < kTT; ++j) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              const int i = base + j * 8 + 2 * q + (c & 1);
              if (i < n) {
                const int p = sorted[first + i];
                my_sums[(p / kTopK - t_begin) * 16 + g + (c / 2) * 8] += weights[p] * acc[j][c];
              }
            }
          }
        }
        __syncwarp();
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < t_count * 16; i += Shape::kThreads) {
    const int t = i / 16, r = i % 16, row = blockIdx.x * 16 + r;
    if (row < kHidden) {
      float v = 0.0f;
#pragma unroll
      for (int k = 0; k < WK; ++k) v += sums[(k * kWindow + t) * 16 + r];
      x[static_cast<long long>(t_begin + t) * kHidden + row] += v;
    }
  }
}

template <int kExperts, int kTopK, int kHidden, int kInter, int kTT>
inline void launch_moe_gate_up_stream(const bf16* h, const bf16* weight, const int* scratch, bf16* out, int tokens,
                                      cudaStream_t stream) {
  using Shape = ExpertStreamShape<2 * kInter, kHidden, kTT>;
  auto kernel = moe_gate_up_stream_kernel<kExperts, kTopK, kHidden, kInter, kTT>;
  const dim3 grid(Shape::kRowBlocks, min_int(kExperts, tokens * kTopK));
  KILN_LAUNCH(kernel, grid, Shape::kThreads, 0, stream, h, weight, scratch, out);
}

template <int kExperts, int kTopK, int kHidden, int kInter, int kWindowTiles>
inline void launch_moe_down_stream(const bf16* act, const bf16* weight, const float* weights, const int* scratch,
                                   float* x, int t_begin, int t_count, cudaStream_t stream) {
  using Shape = DownStreamShape<kHidden, kInter, kWindowTiles>;
  constexpr auto kernel = moe_down_stream_kernel<kExperts, kTopK, kHidden, kInter, kWindowTiles>;
  allow_dynamic_smem_once<kernel, Shape::kSmemBytes>();
  KILN_LAUNCH(kernel, ceil_div(kHidden, 16), Shape::kThreads, Shape::kSmemBytes, stream, act, weight, weights, scratch,
              x, t_begin, t_count);
}

// ---- grouped GEMM problems (prefill): one group per expert, tiles of 64 of its pairs ----

template <int kExperts>
__device__ __forceinline__ bool locate_expert_tile(const int* scratch, int& group, int& m0, int& rows) {
  const GroupTile tile = locate_group_tile<kExperts>(scratch, blockIdx.y, 64);
  if (tile.group < 0) return false;
  group = tile.group;
  m0 = tile.first;
  rows = min(64, tile.rows - tile.first);
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
};

// out[p] = weight[e] · h[p / kTopK] for the pairs p of expert e.
template <int kExperts, int kTopK, int kHidden, int kInter>
struct MoeGateUpGemm : ExpertPairTiles<kExperts> {
  using ExpertPairTiles<kExperts>::pair;
  static constexpr int kN = 2 * kInter, kK = kHidden;
  static constexpr bool kBKMajor = false;
  struct Args {
    const bf16* h;
    const bf16* weight;
    const int* scratch;
    bf16* out;
  };
  __device__ static const bf16* a_row(const Args& a, int group, int m) {
    return a.h + static_cast<long long>(pair(a, group, m) / kTopK) * kHidden;
  }
  __device__ static const bf16* b_matrix(const Args& a, int group) {
    return a.weight + static_cast<long long>(group) * kN * kK;
  }
  __device__ static void store(const Args& a, int group, int m, int n, float v0, float v1, bool two) {
    store_bf16_pair(a.out + static_cast<long long>(pair(a, group, m)) * kN + n, v0, v1, two);
  }
};

// x[p / kTopK] += weights[p] · (weight[e] · act[p]) for the pairs p of expert e (fp32 atomics).
template <int kExperts, int kTopK, int kHidden, int kInter>
struct MoeDownGemm : ExpertPairTiles<kExperts> {
  using ExpertPairTiles<kExperts>::pair;
  static constexpr int kN = kHidden, kK = kInter;
  static constexpr bool kBKMajor = false;
  struct Args {
    const bf16* act;
    const bf16* weight;
    const float* weights;
    const int* scratch;
    float* x;
  };
  __device__ static const bf16* a_row(const Args& a, int group, int m) {
    return a.act + static_cast<long long>(pair(a, group, m)) * kInter;
  }
  __device__ static const bf16* b_matrix(const Args& a, int group) {
    return a.weight + static_cast<long long>(group) * kN * kK;
  }
  __device__ static void store(const Args& a, int group, int m, int n, float v0, float v1, bool two) {
    const int p = pair(a, group, m);
    const float w = a.weights[p];
    float* dst = a.x + static_cast<long long>(p / kTopK) * kHidden + n;
    atomicAdd(dst, w * v0);
    if (two) atomicAdd(dst + 1, w * v1);
  }
};

// Row tiles of 64 pairs over all experts: at most ceil(pairs / 64) + (experts used) of them.
template <int kExperts, int kTopK>
inline int expert_tile_bound(int tokens) {
  const int pairs = tokens * kTopK;
  return ceil_div(pairs, 64) + min_int(kExperts, pairs);
}

// Passes of 8 pairs up to 8 tokens, else of 16: an expert rarely has more pairs than that at decode
// (64 tokens × top-6 of 64 experts: 6 on average), and narrow passes leave registers for more
// weight loads in flight. A busier expert takes more passes (its rows come from L2 again).
template <int kExperts, int kTopK, int kHidden, int kInter>
inline void moe_gate_up_streaming(const bf16* h, const bf16* weight, const int* scratch, bf16* out, int tokens,
                                  cudaStream_t stream) {
  if (tokens <= 8) {
    launch_moe_gate_up_stream<kExperts, kTopK, kHidden, kInter, 1>(h, weight, scratch, out, tokens, stream);
  } else {
    launch_moe_gate_up_stream<kExperts, kTopK, kHidden, kInter, 2>(h, weight, scratch, out, tokens, stream);
  }
}

// Windows of at most 64 tokens, each reading the experts its tokens chose.
template <int kExperts, int kTopK, int kHidden, int kInter>
inline void moe_down_streaming(const bf16* act, const bf16* weight, const float* weights, const int* scratch, float* x,
                               int tokens, cudaStream_t stream) {
  for (int t0 = 0; t0 < tokens; t0 += 64) {
    const int n = min_int(64, tokens - t0);
    switch (token_tiles_for(n)) {
      case 1: launch_moe_down_stream<kExperts, kTopK, kHidden, kInter, 1>(act, weight, weights, scratch, x, t0, n, stream); break;
      case 2: launch_moe_down_stream<kExperts, kTopK, kHidden, kInter, 2>(act, weight, weights, scratch, x, t0, n, stream); break;
      case 4: launch_moe_down_stream<kExperts, kTopK, kHidden, kInter, 4>(act, weight, weights, scratch, x, t0, n, stream); break;
      default: launch_moe_down_stream<kExperts, kTopK, kHidden, kInter, 8>(act, weight, weights, scratch, x, t0, n, stream); break;
    }
  }
}

}  // namespace detail

// logits [T, kExperts] fp32 -> ids, weights [T, kTopK] in order of descending score.
template <int kExperts, int kTopK, int kGroups, int kTopkGroups, bool kGroupLimited, bool kNormalize>
void moe_route(const float* logits, int* ids, float* weights, int tokens, float scaling, cudaStream_t stream) {
  static_assert(kExperts > 0 && kTopK > 0 && kTopK <= kExperts && kTopK <= 32,
                "moe_route: 1 <= kTopK <= min(kExperts, 32)");
  static_assert(!kGroupLimited || (kGroups > 0 && kGroups <= 32 && kExperts % kGroups == 0 &&
                                   kTopkGroups > 0 && kTopkGroups <= kGroups),
                "moe_route: groups must split the experts evenly, at most 32 groups, 1 <= kTopkGroups <= kGroups");
  if (tokens <= 0) return;
  auto kernel = detail::moe_route_kernel<kExperts, kTopK, kGroups, kTopkGroups, kGroupLimited, kNormalize>;
  KILN_LAUNCH(kernel, detail::ceil_div(tokens, 4), 128, 0, stream, logits, ids, weights, tokens, scaling);
}

// h [T, kHidden], weight [kExperts, 2·kInter, kHidden], ids [T, kTopK] -> out [T, kTopK, 2·kInter];
// scratch: kExperts + 1 + T·kTopK ints, left holding the buckets for moe_down.
template <int kExperts, int kTopK, int kHidden, int kInter>
void moe_gate_up(const bf16* h, const bf16* weight, const int* ids, bf16* out, int* scratch, int tokens,
                 cudaStream_t stream) {
  static_assert(kExperts > 0 && kTopK > 0 && kHidden > 0 && kInter > 0, "moe_gate_up: sizes must be positive");
  if (tokens <= 0) return;
  detail::launch_moe_bucket<kExperts, kTopK>(ids, scratch, tokens, stream);
  if constexpr (kHidden % 8 == 0) {
    if (tokens > detail::kMoeStreamTokens) {
      using P = detail::MoeGateUpGemm<kExperts, kTopK, kHidden, kInter>;
      const dim3 grid(detail::ceil_div(2 * kInter, 128), detail::expert_tile_bound<kExperts, kTopK>(tokens));
      detail::launch_tile_gemm<P, 128>(typename P::Args{h, weight, scratch, out}, grid, stream);
      return;
    }
  }
  detail::moe_gate_up_streaming<kExperts, kTopK, kHidden, kInter>(h, weight, scratch, out, tokens, stream);
}

// act [T, kTopK, kInter], weight [kExperts, kHidden, kInter]: x[t] += Σ_j weights[t, j] ·
// weight[ids[t, j]] · act[t, j]. Needs the buckets moe_gate_up left in scratch for these ids.
template <int kExperts, int kTopK, int kHidden, int kInter>
void moe_down(const bf16* act, const bf16* weight, const int* ids, const float* weights, const int* scratch, float* x,
              int tokens, cudaStream_t stream) {
  static_assert(kExperts > 0 && kTopK > 0 && kHidden > 0 && kInter > 0, "moe_down: sizes must be positive");
  (void)ids;  // the buckets in scratch carry them
  if (tokens <= 0) return;
  if constexpr (kInter % 8 == 0) {
    if (tokens > detail::kMoeStreamTokens) {
      using P = detail::MoeDownGemm<kExperts, kTopK, kHidden, kInter>;
      const dim3 grid(detail::ceil_div(kHidden, 128), detail::expert_tile_bound<kExperts, kTopK>(tokens));
      detail::launch_tile_gemm<P, 128>(typename P::Args{act, weight, weights, scratch, x}, grid, stream);
      return;
    }
  }
  detail::moe_down_streaming<kExperts, kTopK, kHidden, kInter>(act, weight, weights, scratch, x, tokens, stream);
}

}  // namespace kiln
