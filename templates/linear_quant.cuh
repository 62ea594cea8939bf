// The linear op over a GpuMatrix (weight_matrix.hpp): bf16 rows take linear.cuh's GEMV; Q8_0, Q4_0,
// Q4_K and Q6_K matrices kept as the GGUF file stores them, and FP8 ones, take the GEMV below,
// which dequantizes in registers, and the prefill's GEMM takes bf16 rows from dequantize_matrix.
//
// The lane layout is linear.cuh's: a warp owns 16 rows; lane (g, q) holds rows g and g + 8 and
// columns 8q..8q+7 of every 32-value block; one column step is a group of blocks (64 quant bytes
// of a row: 16 bytes per lane). The quants enter the mma as exact integers in bf16 (|q| <= 128
// needs at most 8 significant bits); a block's two k16 mmas sum into fresh accumulators, which the
// block's scale then multiplies into the running sum. So the decode computes with the file's
// values, not bf16 roundings of them, and every output is the same sum whatever the token count
// (the plan's column split is the bf16 GEMV's, by groups). A Q4_K sub-block's values are
// d·sc · n - dmin·m: the mma sums (128 + n)·x (QuantValues<q4_k>::pair), a second one (all-ones
// weights) the block's Σx for each token, and the block adds d·sc · Σ(128 + n)·x - (dmin·m +
// 128·d·sc) · Σx (the same value as summing ggml's dequantized weights, rounded differently).
// Q6_K has a scale per 16 columns: its lanes hold columns 4q..4q+3 and 16+4q..16+4q+3 of a block
// instead (weight_matrix.hpp), so that each of the block's two mmas sees one sub-block, and each
// mma's sum takes its own scale. FP8's codes enter the mma as their exact bf16 values (E4M3 has 3
// mantissa bits), a lane's 16 bytes being 16 consecutive columns of the row (rows stay as stored,
// for cuBLASLt), and the 128 × 128 block's scale multiplies each half's sum as a block scale would.
#pragma once

#include "templates/blocks/mma.cuh"
#include "templates/blocks/stream_rows.cuh"
#include "templates/common.cuh"
#include "templates/gemv_plan.hpp"
#include "templates/linear.cuh"
#include "templates/quant_values.cuh"
#include "templates/weight_matrix.hpp"

namespace kiln {

namespace detail {

// Launch geometry: one 16-row tile per block, its column steps (one group each) split over the
// block's warps. A group of quantized blocks is 3.5 (Q4_0) or 1.9 (Q8_0) times fewer bytes than a
// bf16 step but more instructions, so more warps keep the loads in flight: rows of 64 groups or
// more take 16 column splits, shorter rows 8, each warp with one group in flight. Measured on an
// H100 at Llama-3.1-8B's shapes, one token (bench_kernels --quant-only, bench/RESULTS.md
// 2026-11-25; 1 × splits × groups in flight): Q4_0 down 4096×14336 1 × 16 × 1 17.5 µs, 1 × 8 × 4
// 31.3, the bf16 plan's 1 × 8 × 2 23.7; gate_up 28672×4096 1 × 8 × 4 30.0, 1 × 16 × 1 32.5, the
// plan's 4 × 2 × 4 44.2. Short rows took 4 groups in flight from that sweep, which did not try one
// with 8 splits; on an H200 (2026-11-27) 1 × 8 × 1 was faster: Q4_0 qkv 6144×4096 10.7 µs against
// 13.7 with 4 in flight, gate_up 28.6 against 32.7 (o 4096×4096: 10.0 against 9.1), Q8_0 qkv 14.5
// against 16.3, gate_up 43.3 against 44.6, Q4_K qkv 12.2 against 14.0, gate_up 37.4 against 39.2
// (ncu on Q4_0's gate_up with 4 in flight: 99 registers a thread, 2 blocks an SM, a quarter of
// the warps it could hold). Groups through a shared-memory ring filled by cp.async, so that more
// are in flight without registers, were slower still (H200, 2026-11-27: gate_up 37.3-47.5 µs with
// 2-8 in flight; the copies and shared reads kept the L1TEX pipe 71% busy). The split is the same
// for every token count (it fixes each output's sum order). The last four parameters override (0,
// -1: automatic); the benchmark uses them.
template <int kN, int kK, MatrixFormat F, int kSMs, int kTokenTiles, int kWarpsNSet = 0, int kWarpsKSet = 0,
          int kUnrollSet = 0, int kSharedInputSet = -1>
struct QuantGemvShape {
  static_assert(kK % kQuantBlockValues == 0, "quantized GEMV: k must be whole blocks");
  static constexpr int kGroupBlocks = quant_group_blocks(F);
  static constexpr int kSteps = static_cast<int>(quant_row_groups(F, kK));
  static constexpr GemvPlan kPlan = gemv_plan(kN, kSteps * 32, kSMs);
  static constexpr int kTokenTileCount = kTokenTiles;
  static constexpr bool kLongRows = kSteps >= 64;
  static constexpr int kWarpsN = kWarpsNSet > 0 ? kWarpsNSet : 1;
  static constexpr int kWarpsK = kWarpsKSet > 0 ? kWarpsKSet : min_int(kLongRows ? 16 : 8, kSteps);
  static constexpr int kRowBlocks = ceil_div(kPlan.row_tiles, kWarpsN);
  static constexpr int kThreads = kWarpsN * kWarpsK * 32;
  // Groups in flight per warp: one, but where a warp's share of a row of 4096 values or more is
  // exactly 4 groups of Q4_0 or Q8_0 (few registers a group; Q4_K's headers take more) in a
  // one-token tile: then all 4, requested at once before the PDL wait. Chained in a CUDA graph
  // (bench_kernels --quant-only, H200, 2026-11-27 fourth session, µs): Q4_0 gate_up 28672×4096
  // 22.6 -> 20.2, qkv 6144×4096 8.1 -> 7.2, Q8_0 gate_up 36.7 -> 34.8, qkv 10.7 either way; o
  // 4096×4096 5.9 -> 6.4, Q4_K qkv 8.9 -> 9.9. o_proj, slower so, gains in a decode step, where its
  // blocks start during the attention (common.cuh): Llama-3.1-8B Q4_0 1.990 -> 1.927 ms a token,
  // Q8_0 2.903 -> 2.860 (H200, 2026-11-27 seventh session). End to end (gguf_bench.py, same card, same run):
  // Llama-3.1-8B Q4_0 2.306 -> 2.226 ms a token, Q8_0 3.192 -> 3.104; Llama-3.2-1B Q8_0 (rows of
  // 2048) 0.818 -> 0.830, hence the row length. The sum order is the same either way (groups in
  // step order). FP8 (Q8_0's group bytes, one scale for two groups) gains at every row count
  // (H200, 2026-11-27 fifth session, chained, µs: Qwen3-8B's qkv 6144×4096 10.8 -> 10.1, o
  // 4096×4096 7.2 -> 6.8, gate_up 24576×4096 31.6 -> 28.0).
  static constexpr bool kAllInFlight =
      kTokenTiles == 1 && kK >= 4096 && kSteps == 4 * kWarpsK &&
      (F == MatrixFormat::q4_0 || F == MatrixFormat::q8_0 || F == MatrixFormat::fp8);
  static constexpr int kUnroll = kUnrollSet > 0 ? kUnrollSet : kAllInFlight ? 4 : 1;
  static constexpr int kWarpGroups = ceil_div(kSteps, kWarpsK * kUnroll);  // a warp's groups at most
  // Whether a warp requests its first two groups before the PDL wait, not only its first: where it
  // has at most 4, the second was a round trip to HBM after the wait on the critical path (H100,
  // 2026-11-27: Llama-3.2-1B's Q4_0 gate_up 12.4 -> 11.2 µs, 8B Q8_0 qkv 16.0 -> 15.0, gate_up 49.3
  // -> 46.9). Rows of more groups (down_proj's) kept the second one live through the wait in 70
  // registers instead of 56, one block of 512 threads an SM: 20% slower.
  static constexpr bool kEarlySecond = kWarpGroups <= 4;
  // Whether a warp's loop over its groups is unrolled (3 to 8 of them). Rolled, each group took
  // ~60 instructions besides its arithmetic: the copy of the next group's registers into the
  // current one's, and the next request's address rebuilt from the thread index (ptxas
  // rematerializes it). Q4_K's gate_up 28672×4096 took 261 instructions a group rolled, ~200
  // unrolled. One token, chained (H200, 2026-12-02; bench/RESULTS.md), µs rolled -> unrolled: Q4_K
  // qkv 6144×4096 7.90 -> 7.48, o 7.32 -> 6.77, gate_up 31.09 -> 27.16, down 4096×14336 15.00 ->
  // 14.56; Q6_K down 17.49 -> 16.33, the 128256-row LM head 153.6 -> 139.2 (Q4_0's down 10.49 ->
  // 10.94, the one that lost). Not with two groups (ptxas fits 64 registers and spills:
  // Llama-3.2-1B's Q4_K qkv 3072×2048 3.22 -> 4.40), nor where 512-thread blocks keep two groups
  // live (kEarlySecond: the same, 2048×8192 6.50 -> 8.70), nor past 8 (Q8_0's down 4096×14336,
  // 14 groups, rolled by two: 81 registers instead of 58, one block an SM, 17.37 -> 21.03), nor
  // Q4_0's one-ahead loops (its down_proj, above; Llama-3.1-8B Q4_0 1.858 -> 1.883 ms a token):
  // its groups have no header to decode, the fewest instructions, and the copies cost it least.
  // One token tile only, the case measured: with more, ptxas gave the unrolled loop fewer registers
  // up to four tiles but spilled more at six and eight (Q4_K's down_proj: 224 bytes against 32).
  static constexpr bool kUnrolledGroups = kTokenTiles == 1 && kWarpGroups >= 3 && kWarpGroups <= 8 &&
                                          !(kEarlySecond && kWarpsN * kWarpsK > 8) &&
                                          (kEarlySecond || F != MatrixFormat::q4_0);
  // A group's inputs for every token tile are loaded before its first mma when that fits in
  // registers (few tiles); with more, each block's inputs just before its mmas.
  static constexpr bool kGroupInputs = kTokenTiles <= 2;
  // Rows whose block count is a multiple of the group's: no padding block, no input past kK.
  static constexpr bool kWholeGroups = (kK / kQuantBlockValues) % kGroupBlocks == 0;
  // The block copies the token rows into shared memory first (all of them in flight at once) and
  // its warps read them from there. Read from global memory step by step, each step's inputs were
  // a round trip to L2 on every warp's critical path (the kernel before wrote them, and the warps
  // of a block read disjoint columns, so L1 rarely had them): Llama-3.1-8B's Q4_0 down_proj took
  // 22.4 µs that way on an H100, 17.0 from shared memory (bench/RESULTS.md, 2026-11-27). Where the
  // rows fit (linear_quant: at most kMaxSharedInputBytes) and are whole groups.
  static constexpr bool kSharedInput = kSharedInputSet >= 0 ? kSharedInputSet != 0 : kWholeGroups;
  // A token row in shared memory, 16 bytes longer than the row, so that the 8 rows a warp reads
  // at once spread over the banks (4 wavefronts for its 512 bytes, not 8).
  static constexpr int kSharedRowBytes = kK * 2 + 16;
  static constexpr int kVec = vec_width(kK, 2);
};

// Token rows in shared memory at most (QuantGemvShape::kSharedInput): one token of a 14336-value
// row, three of a 4096-value one (larger passes read their inputs from global memory); a block
// then leaves room for others beside it, and with its split sums' 8 KB at most it stays under the
// 48 KB a block has without opting in.
constexpr int kMaxSharedInputBytes = 32 * 1024;

// Block blockIdx.x: row tiles blockIdx.x · kWarpsN + wn, each with all kWarpsK column splits,
// summed in shared memory in split order (linear.cuh's narrow plan).
template <int kN, int kK, LinearOut kOut, MatrixFormat F, typename Shape>
__global__ void __launch_bounds__(Shape::kThreads)
    gemv_quant_kernel(const bf16* __restrict__ in, const unsigned char* __restrict__ matrix,
                      typename LinearOutType<kOut>::type* __restrict__ out, int tokens) {
  using Q = QuantValues<F>;
  constexpr int T = Shape::kTokenTileCount, U = Shape::kUnroll, WK = Shape::kWarpsK, G = Shape::kGroupBlocks;
  constexpr int kSteps = Shape::kSteps;
  __shared__ float partial[Shape::kWarpsN * WK][128];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wn = warp / WK, wk = warp % WK;
  const int g = lane / 4, q = lane % 4;
  const int tile = blockIdx.x * Shape::kWarpsN + wn;
  // Rows past kN compute on row kN - 1; their outputs are never stored (mma rows are independent).
  const long long r0 = min(tile * 16 + g, kN - 1), r1 = min(tile * 16 + g + 8, kN - 1);
  const unsigned char* w0 = matrix + r0 * kSteps * kQuantGroupBytes + q * 16;
  const unsigned char* w1 = matrix + r1 * kSteps * kQuantGroupBytes + q * 16;
  const auto s0 = Q::row(matrix, kN, kK, r0), s1 = Q::row(matrix, kN, kK, r1);
  const unsigned char* h0 = nullptr;  // Q6_K: the rows' high bits
  const unsigned char* h1 = nullptr;
  if constexpr (Q::kHighBits) h0 = Q::high_row(matrix, kN, kK, r0, q), h1 = Q::high_row(matrix, kN, kK, r1, q);

  extern __shared__ uint4 shared_rows[];  // the token rows, when Shape::kSharedInput
  const bf16* x_rows[T];  // token rows past `tokens` repeat the last one; their outputs are not stored
#pragma unroll
  for (int j = 0; j < T; ++j) {
    const int t = min_int(j * 8 + g, tokens - 1);
    const char* shared_row = reinterpret_cast<const char*>(shared_rows) + t * Shape::kSharedRowBytes;
    x_rows[j] = Shape::kSharedInput ? reinterpret_cast<const bf16*>(shared_row) : in + static_cast<long long>(t) * kK;
  }
  float acc[T][4];
#pragma unroll
  for (int j = 0; j < T; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;

  struct Group {
    uint4 w0[U], w1[U];
    typename Q::High e0[U], e1[U];
    typename Q::Scales d0[U], d1[U];
  };
  auto load = [&](int s, Group& grp) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int step = min_int(s + u * WK, kSteps - 1);  // a step past the row is loaded, not used
      grp.w0[u] = load_streaming_16(w0 + static_cast<long long>(step) * kQuantGroupBytes);
      grp.w1[u] = load_streaming_16(w1 + static_cast<long long>(step) * kQuantGroupBytes);
      if constexpr (Q::kHighBits) {
        grp.e0[u] = load_streaming_8(h0 + static_cast<long long>(step) * kQ6kHighGroupBytes);
        grp.e1[u] = load_streaming_8(h1 + static_cast<long long>(step) * kQ6kHighGroupBytes);
      }
      grp.d0[u] = Q::load_scales(s0, step);
      grp.d1[u] = Q::load_scales(s1, step);
    }
  };
  auto multiply = [&](int s, const Group& grp) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int step = s + u * WK;
      if (step >= kSteps) break;
      // Only a padding block (past kK) reads zeros: every token row is a real one (x_rows).
      auto input = [&](int b, int j) {
        if constexpr (Q::kHalfScales) {  // Q6_K: the lane's columns 4q..4q+3 and 16+4q..16+4q+3
          static_assert(Shape::kWholeGroups, "quantized GEMV: Q6_K rows are whole super-blocks");
          const int col = (step * G + b) * 32 + q * 4;
          const uint2 lo = Shape::kSharedInput ? *reinterpret_cast<const uint2*>(x_rows[j] + col)
                                               : __ldg(reinterpret_cast<const uint2*>(x_rows[j] + col));
          const uint2 hi = Shape::kSharedInput ? *reinterpret_cast<const uint2*>(x_rows[j] + col + 16)
                                               : __ldg(reinterpret_cast<const uint2*>(x_rows[j] + col + 16));
          return make_uint4(lo.x, lo.y, hi.x, hi.y);
        } else {
          const int col = step * G * 32 + Q::lane_column(b, q);
          if constexpr (Shape::kSharedInput) return *reinterpret_cast<const uint4*>(x_rows[j] + col);
          if constexpr (Shape::kWholeGroups) return __ldg(reinterpret_cast<const uint4*>(x_rows[j] + col));
          return load_row_chunk<kK, Shape::kVec, RowLoad::read_only>(x_rows[j], col, true);
        }
      };
      constexpr int SB = Q::kHalfScales ? 2 : 1;  // scales a block
      BlockScale scales0[G * SB], scales1[G * SB];  // rows g and g + 8
      Q::group_scales(grp.d0[u], step, scales0);
      Q::group_scales(grp.d1[u], step, scales1);
      constexpr int XB = Shape::kGroupInputs ? G : 1;  // blocks whose inputs are held at once
      uint4 x[XB][T];
      if constexpr (Shape::kGroupInputs) {
#pragma unroll
        for (int b = 0; b < G; ++b)
#pragma unroll
          for (int j = 0; j < T; ++j) x[b][j] = input(b, j);
      }
#pragma unroll
      for (int b = 0; b < G; ++b) {
        if constexpr (!Shape::kGroupInputs) {
#pragma unroll
          for (int j = 0; j < T; ++j) x[0][j] = input(b, j);
        }
        const uint4 a0 = block_values<Q>(grp.w0[u], grp.e0[u], b), a1 = block_values<Q>(grp.w1[u], grp.e1[u], b);
        if constexpr (Q::kHalfScales) {  // each k16 mma's sum times its own sub-block scale
#pragma unroll
          for (int j = 0; j < T; ++j) {
            float lo[4] = {0.0f, 0.0f, 0.0f, 0.0f}, hi[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma_row_halves(lo, hi, a0, a1, x[Shape::kGroupInputs ? b : 0][j]);
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              const BlockScale* s = c < 2 ? scales0 : scales1;
              acc[j][c] = fmaf(s[2 * b + 1].d, hi[c], fmaf(s[2 * b].d, lo[c], acc[j][c]));
            }
          }
          continue;
        }
        const BlockScale d0 = scales0[b], d1 = scales1[b];
#pragma unroll
        for (int j = 0; j < T; ++j) {
          const uint4& xb = x[Shape::kGroupInputs ? b : 0][j];
          float block_sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          mma_row_chunk(block_sum, a0, a1, xb);
          acc[j][0] = fmaf(d0.d, block_sum[0], acc[j][0]);
          acc[j][1] = fmaf(d0.d, block_sum[1], acc[j][1]);
          acc[j][2] = fmaf(d1.d, block_sum[2], acc[j][2]);
          acc[j][3] = fmaf(d1.d, block_sum[3], acc[j][3]);
          if constexpr (Q::kHasMin) {
            // Σx of the block for tokens 2q and 2q + 1 (rows g and g + 8 alike): weights of ones.
            constexpr unsigned kOnes = 0x3F803F80u;  // bf16 1.0 twice
            const uint4 ones = make_uint4(kOnes, kOnes, kOnes, kOnes);
            float x_sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma_row_chunk(x_sum, ones, ones, xb);
            const float m0 = Q::gemv_offset(d0), m1 = Q::gemv_offset(d1);
            acc[j][0] = fmaf(-m0, x_sum[0], acc[j][0]);
            acc[j][1] = fmaf(-m0, x_sum[1], acc[j][1]);
            acc[j][2] = fmaf(-m1, x_sum[2], acc[j][2]);
            acc[j][3] = fmaf(-m1, x_sum[3], acc[j][3]);
          }
        }
      }
    }
  };

  // The warp's first group (Shape::kEarlySecond: its first two) is requested before the wait
  // (weights only: no kernel writes them); then each group while the one before it is multiplied.
  constexpr int kStride = WK * U;  // column steps from one group of the warp to its next
  Group current, next;
  if (wk < kSteps) load(wk, current);
  if (Shape::kEarlySecond && wk + kStride < kSteps) load(wk + kStride, next);
  pdl_release_and_wait();
  if constexpr (Shape::kSharedInput) {
    static_assert(Shape::kWholeGroups, "quantized GEMV: shared token rows are whole groups (16-byte chunks)");
    constexpr int kChunks = kK / 8;  // 16-byte chunks of a row
    for (int i = threadIdx.x; i < tokens * kChunks; i += Shape::kThreads) {
      const int t = i / kChunks, c = i % kChunks;
      shared_rows[(t * Shape::kSharedRowBytes) / 16 + c] =
          __ldg(reinterpret_cast<const uint4*>(in + static_cast<long long>(t) * kK) + c);
    }
    __syncthreads();
  }
  if constexpr (Shape::kUnrolledGroups) {
    // Unrolled: group i of the warp (column step wk + i · kStride) is multiplied from buffer
    // i % 2, so the two buffers take turns with no copy from one to the other, and each request's
    // address is the warp's first plus a constant. With kEarlySecond the buffer just multiplied
    // takes group i + 2; otherwise group i + 1 is requested into the other buffer just before
    // group i is multiplied.
    auto group = [&](int i, Group& mine, Group& other) {
      const int s = wk + i * kStride;
      if (s >= kSteps) return false;
      if constexpr (Shape::kEarlySecond) {
        multiply(s, mine);
        if (s + 2 * kStride < kSteps) load(s + 2 * kStride, mine);
      } else {
        if (s + kStride < kSteps) load(s + kStride, other);
        multiply(s, mine);
      }
      return true;
    };
#pragma unroll
    for (int i = 0; i < Shape::kWarpGroups; i += 2) {
      if (!group(i, current, next) || !group(i + 1, next, current)) break;
    }
  } else if constexpr (Shape::kEarlySecond) {
#pragma unroll 1
    for (int s = wk; s < kSteps; s += kStride) {
      multiply(s, current);
      if (s + kStride >= kSteps) break;
      current = next;
      if (s + 2 * kStride < kSteps) load(s + 2 * kStride, next);
    }
  } else {
#pragma unroll 1
    for (int s = wk; s < kSteps; s += kStride) {
      const bool more = s + kStride < kSteps;
      if (more) load(s + kStride, next);
      multiply(s, current);
      if (more) current = next;
    }
  }

#pragma unroll
  for (int j = 0; j < T; ++j) {
    sum_column_splits<Shape::kWarpsN, WK, Shape::kThreads>(partial, acc[j], [&](int block_row, int token, float v) {
      const int n = blockIdx.x * Shape::kWarpsN * 16 + block_row;
      const int t = j * 8 + token;
      if (n < kN && t < tokens) store_linear_out<kOut>(out + static_cast<long long>(t) * kN + n, v);
    });
  }
}

// bf16 rows [n, k] of a quantized matrix (value = quant · scale, rounded once): one thread per
// lane chunk (row, group, q).
template <MatrixFormat F>
__global__ void __launch_bounds__(256)
    dequantize_matrix_kernel(const unsigned char* __restrict__ matrix, bf16* __restrict__ out, int n, int k) {
  pdl_release_and_wait();
  const long long groups = quant_row_groups(F, k);
  const long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x;
  if (i >= n * groups * 4) return;
  const int q = static_cast<int>(i % 4);
  const long long s = (i / 4) % groups, r = i / 4 / groups;
  decode_chunk<F>(matrix, n, k, r, s, q, [&](long long col, const auto& v) {
    bf16* at = out + r * k + col;
    if constexpr (sizeof(v) == 8 * sizeof(float)) {
      *reinterpret_cast<uint4*>(at) = make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]),
                                                 pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7]));
    } else {
      *reinterpret_cast<uint2*>(at) = make_uint2(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]));
    }
  });
}

// One pass of at most 8 · Shape::kTokenTileCount tokens.
template <int kN, int kK, LinearOut kOut, MatrixFormat F, typename Shape>
inline void launch_gemv_quant(const bf16* in, const void* matrix, typename LinearOutType<kOut>::type* out, int tokens,
                              cudaStream_t stream) {
  constexpr auto kernel = gemv_quant_kernel<kN, kK, kOut, F, Shape>;
  const int smem = Shape::kSharedInput ? tokens * Shape::kSharedRowBytes : 0;
  KILN_LAUNCH(kernel, dim3(Shape::kRowBlocks), Shape::kThreads, smem, stream, in,
              static_cast<const unsigned char*>(matrix), out, tokens);
}

template <int kN, int kK, LinearOut kOut, MatrixFormat F, int kSMs>
void linear_quant(const bf16* in, const void* matrix, typename LinearOutType<kOut>::type* out, int tokens,
                  cudaStream_t stream) {
  for (int done = 0; done < tokens; done += kStreamPassTokens) {
    const int n = min_int(kStreamPassTokens, tokens - done);
    with_token_tiles(n, [&](auto tiles) {
      constexpr int kTiles = decltype(tiles)::value;
      const bf16* x = in + static_cast<long long>(done) * kK;
      auto* y = out + static_cast<long long>(done) * kN;
      // The same sums either way (only where the inputs are read from differs). FP8 rows longer
      // than 4096 values read theirs from global memory: Qwen3-8B's down_proj 4096×12288 took 16.3
      // µs so, 17.6 from shared memory (H200, chained, 2026-11-27 fifth session), where Q4_0's
      // down_proj gains from shared memory (1.8× fewer weight bytes a value: the copy is more of its time).
      using Shared = QuantGemvShape<kN, kK, F, kSMs, kTiles, 0, 0, 0, 1>;
      using Global = QuantGemvShape<kN, kK, F, kSMs, kTiles, 0, 0, 0, 0>;
      if constexpr (Shared::kWholeGroups && !(F == MatrixFormat::fp8 && kK > 4096)) {
        if (n * Shared::kSharedRowBytes <= kMaxSharedInputBytes) {
          launch_gemv_quant<kN, kK, kOut, F, Shared>(x, matrix, y, n, stream);
          return;
        }
      }
      launch_gemv_quant<kN, kK, kOut, F, Global>(x, matrix, y, n, stream);
    });
  }
}

}  // namespace detail

// The decode linear op over any GpuMatrix: passes of up to 64 tokens, each reading the weights once.
template <shape::linear S>
void linear(const bf16* in, GpuMatrix weight, typename detail::LinearOutType<S.out>::type* out, int tokens,
            float* scratch, cudaStream_t stream) {
  if constexpr (S.k % kQuantBlockValues == 0) {  // a GGUF block format holds whole blocks of a row
    switch (weight.format) {
      case MatrixFormat::bf16:
      case MatrixFormat::q4_1:  // CPU formats: the GPU's loader keeps bf16, Q8_0, Q4_0, Q4_K, Q6_K and FP8 only
      case MatrixFormat::q5_0:
      case MatrixFormat::f32: break;
      case MatrixFormat::fp8:
        detail::linear_quant<S.n, S.k, S.out, MatrixFormat::fp8, S.sms>(in, weight.data, out, tokens, stream);
        return;
      case MatrixFormat::q4_k:
        if constexpr (S.k % kQ4kSuperValues == 0) {  // a Q4_K row is whole super-blocks
          detail::linear_quant<S.n, S.k, S.out, MatrixFormat::q4_k, S.sms>(in, weight.data, out, tokens, stream);
          return;
        }
        break;
      case MatrixFormat::q6_k:
        if constexpr (S.k % kQ4kSuperValues == 0) {  // so is a Q6_K row
          detail::linear_quant<S.n, S.k, S.out, MatrixFormat::q6_k, S.sms>(in, weight.data, out, tokens, stream);
          return;
        }
        break;
      case MatrixFormat::q8_0:
        detail::linear_quant<S.n, S.k, S.out, MatrixFormat::q8_0, S.sms>(in, weight.data, out, tokens, stream);
        return;
      case MatrixFormat::q4_0:
        detail::linear_quant<S.n, S.k, S.out, MatrixFormat::q4_0, S.sms>(in, weight.data, out, tokens, stream);
        return;
    }
  }
  linear<S>(in, static_cast<const bf16*>(weight.data), out, tokens, scratch, stream);
}

}  // namespace kiln
