// The linear op over a GpuMatrix (weight_matrix.hpp): bf16 rows take linear.cuh's GEMV; Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K matrices kept as the GGUF file stores them, and
// FP8 ones, take the GEMV below, which dequantizes in registers, and the prefill's GEMM takes bf16
// rows from dequantize_matrix.
//
// The lane layout is linear.cuh's: a warp owns 16 rows; lane (g, q) holds rows g and g + 8 and
// columns 8q..8q+7 of every 32-value block; one column step is a group of blocks (64 quant bytes
// of a row: 16 bytes per lane). The quants enter the mma as exact integers in bf16 (|q| <= 128
// needs at most 8 significant bits); a block's two k16 mmas sum into fresh accumulators, which the
// block's scale then multiplies into the running sum. So the decode computes with the file's
// values, not bf16 roundings of them, and every output is the same sum whatever the token count
// (the plan's column split is the bf16 GEMV's, by groups). The 5-bit formats' quants take their
// fifth bits from a second area (Q5_0's as u - 16; Q5_1's and Q5_K's as 128 + u, as Q4_1's and
// Q4_K's are 128 + n). Q4_1's values n · d + m are summed as Q4_K's below (its min for dmin·m, with
// the sign turned). A Q4_K sub-block's values are
// d·sc · n - dmin·m: the mma sums (128 + n)·x (QuantValues<q4_k>::pair), a second one (all-ones
// weights) the block's Σx for each token, and the block adds d·sc · Σ(128 + n)·x - (dmin·m +
// 128·d·sc) · Σx (the same value as summing ggml's dequantized weights, rounded differently).
// Q6_K has a scale per 16 columns: its lanes hold columns 4q..4q+3 and 16+4q..16+4q+3 of a block
// instead (weight_matrix.hpp), so that each of the block's two mmas sees one sub-block, and each
// mma's sum takes its own scale; so do Q2_K's and Q3_K's 2-bit quants (8 blocks a group: a
// super-block), Q2_K's as 128 + u with each half's offset d·sc·128 + dmin·m times its own Σx, and
// Q3_K's third bits from a second area. FP8's codes enter the mma as their exact bf16 values (E4M3 has 3
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
// for every token count (it fixes each output's sum order). It depends on the row length alone:
// the grid is one block per 16 · kWarpsN rows, whatever their count (launch_gemv_quant). The last
// four parameters override (0, -1: automatic); the benchmark uses them.
template <int kK, MatrixFormat F, int kTokenTiles, int kWarpsNSet = 0, int kWarpsKSet = 0, int kUnrollSet = 0,
          int kSharedInputSet = -1>
struct QuantGemvShape {
  static_assert(kK % kQuantBlockValues == 0, "quantized GEMV: k must be whole blocks");
  static constexpr int kGroupBlocks = quant_group_blocks(F);
  static constexpr int kSteps = static_cast<int>(quant_row_groups(F, kK));
  static constexpr int kTokenTileCount = kTokenTiles;
  // Rows of 64 groups or more; groups of 8 blocks (Q2_K's and Q3_K's: a super-block) count double
  // (Llama-3.1-8B's down_proj 4096×14336, 56 of them, one token chained, H200, 2026-12-02: Q2_K
  // 24.66 -> 19.95 µs with 16 splits, Q3_K 23.25 -> 20.48; bench/RESULTS.md).
  static constexpr bool kLongRows = kSteps * (kGroupBlocks == 8 ? 2 : 1) >= 64;
  static constexpr int kWarpsN = kWarpsNSet > 0 ? kWarpsNSet : 1;
  // (Half the splits with two groups a request, for the K-quants at rows of 4096 or more, won
  // chained, one token: Q4_K gate_up 28672×4096 29.94 -> 26.30 µs, Q5_K down 4096×14336 22.49 ->
  // 18.54; but lost in the decode step: Llama-3.1-8B Q4_K_M 2.51 -> 2.57 ms a token, Q5_K_M 2.98 ->
  // 3.19; H200, 2026-12-02 twenty-seventh session, bench/RESULTS.md.)
  static constexpr int kWarpsK = kWarpsKSet > 0 ? kWarpsKSet : min_int(kLongRows ? 16 : 8, kSteps);
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

// A matrix's row count: known at compile time for a whole matrix (kN: the layout's offsets and the
// last row are constants, as ptxas best schedules them; with the count a kernel argument, Q4_K's
// 4096×14336 GEMV had 16 spill loads and stores instead of 4), at run time for a part of a
// GpuMatrix in two formats (GpuMatrix::split, chosen by the file).
template <int kRows>
struct FixedRows {
  __host__ __device__ constexpr operator int() const { return kRows; }
};
struct RuntimeRows {
  int value;
  __host__ __device__ constexpr operator int() const { return value; }
};

// An [rows, kK] matrix's outputs (rows: FixedRows<kN>, or a part's RuntimeRows): row block
// blockIdx.x (gemv_quant_body.inc), tokens kN apart in `out`; kPairsSet: a whole matrix's gate | up
// rows in pairs, `out` silu(gate) · up (linear_act.cuh).
template <int kN, int kK, LinearOut kOut, MatrixFormat F, typename Shape, typename Rows, bool kPairsSet = false>
__global__ void __launch_bounds__(Shape::kThreads)
    gemv_quant_kernel(const bf16* __restrict__ in, const unsigned char* __restrict__ matrix,
                      typename LinearOutType<kOut>::type* __restrict__ out, int tokens, Rows rows) {
  constexpr bool kPairs = kPairsSet;
  static_assert(!kPairs || (kOut == LinearOut::store_bf16 && kN % 2 == 0),
                "quantized GEMV: SwiGLU's paired rows need bf16 gate | up rows (of a whole matrix: rows = kN)");
  __shared__ float partial[Shape::kWarpsN * Shape::kWarpsK][128];
  const int block = blockIdx.x;
  const auto wait = [] { pdl_release_and_wait(); };
#include "templates/gemv_quant_body.inc"
}

// Row blocks of a GpuMatrix in two formats in one launch (GpuMatrix::split): the first
// ceil(split / 16) blocks compute its rows [0, split) in format F0, the others its tail in F1, so
// that the tail's few blocks (a Q4_K_M file's v rows: 1024 of 6144) run beside the head's rather
// than after them. Shapes of the same threads and shared token rows (the block is launched with
// one of each). At least 768 threads an SM (two blocks at 512 threads): at most 85 registers a
// thread, 64 at 512, about what ptxas gives each part's kernel alone. Left to itself it gave this
// one 64 at 256 threads and spilled 40 bytes: Llama-3.1-8B's qkv as a Q4_K_M file holds it (Q4_K |
// Q6_K at row 5120, one token, chained; bench_kernels --two-formats, H200, 2026-12-02) took 9.37
// µs so, 8.02 with 80 registers (16 bytes spilled), against 7.51 all Q4_K and 9.39 all Q8_0.
template <int kThreads>
constexpr int kPartsMinBlocks = 768 / kThreads > 2 ? 768 / kThreads : 2;
template <int kN, int kK, LinearOut kOut, MatrixFormat F0, typename Shape0, MatrixFormat F1, typename Shape1,
          int kMinBlocks = kPartsMinBlocks<Shape0::kThreads>>
__global__ void __launch_bounds__(Shape0::kThreads, kMinBlocks)
    gemv_quant_parts_kernel(const bf16* __restrict__ in, const unsigned char* __restrict__ head,
                            const unsigned char* __restrict__ tail,
                            typename LinearOutType<kOut>::type* __restrict__ all_out, int tokens, int split) {
  static_assert(Shape0::kThreads == Shape1::kThreads && Shape0::kWarpsN == 1 && Shape1::kWarpsN == 1 &&
                    Shape0::kSharedInput == Shape1::kSharedInput,
                "quantized GEMV in two parts: both parts' blocks must be alike");
  __shared__ float partial[Shape0::kWarpsK > Shape1::kWarpsK ? Shape0::kWarpsK : Shape1::kWarpsK][128];
  constexpr bool kPairs = false;
  const int head_blocks = ceil_div(split, 16);
  const auto wait = [] { pdl_release_and_wait(); };
  if (static_cast<int>(blockIdx.x) < head_blocks) {
    constexpr MatrixFormat F = F0;
    using Shape = Shape0;
    const unsigned char* __restrict__ const matrix = head;
    auto* __restrict__ const out = all_out;
    const RuntimeRows rows{split};
    const int block = blockIdx.x;
#include "templates/gemv_quant_body.inc"
  } else {
    constexpr MatrixFormat F = F1;
    using Shape = Shape1;
    const unsigned char* __restrict__ const matrix = tail;
    auto* __restrict__ const out = all_out + split;
    const RuntimeRows rows{kN - split};
    const int block = blockIdx.x - head_blocks;
#include "templates/gemv_quant_body.inc"
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

// One pass of at most 8 · Shape::kTokenTileCount tokens over an [rows, kK] matrix (rows: kN, or
// the part of a GpuMatrix in two formats that `out` starts at). kPairs: gemv_quant_kernel's.
template <int kN, int kK, LinearOut kOut, MatrixFormat F, typename Shape, typename Rows = FixedRows<kN>,
          bool kPairs = false>
inline void launch_gemv_quant(const bf16* in, const void* matrix, typename LinearOutType<kOut>::type* out, int tokens,
                              cudaStream_t stream, Rows rows = {}) {
  constexpr auto kernel = gemv_quant_kernel<kN, kK, kOut, F, Shape, Rows, kPairs>;
  const int smem = Shape::kSharedInput ? tokens * Shape::kSharedRowBytes : 0;
  KILN_LAUNCH(kernel, dim3(ceil_div(int{rows}, 16 * Shape::kWarpsN)), Shape::kThreads, smem, stream, in,
              static_cast<const unsigned char*>(matrix), out, tokens, rows);
}

// The GEMV's shape for a pass of kTiles token tiles, its token rows in shared memory (kShared) or
// read from global memory.
template <int kK, MatrixFormat F, int kTiles, bool kShared>
using QuantPassShape = QuantGemvShape<kK, F, kTiles, 0, 0, 0, kShared ? 1 : 0>;

// Whether a pass of `tokens` reads its token rows from shared memory: where they are whole groups
// and fit. The same sums either way (only where the inputs are read from differs). FP8 rows longer
// than 4096 values read theirs from global memory: Qwen3-8B's down_proj 4096×12288 took 16.3 µs
// so, 17.6 from shared memory (H200, chained, 2026-11-27 fifth session), where Q4_0's down_proj
// gains from shared memory (1.8× fewer weight bytes a value: the copy is more of its time).
template <int kK, MatrixFormat F>
using SharedRowsOf = QuantPassShape<kK, F, 1, true>;  // a row's bytes and groups
// The fewest tokens of a pass of kTiles token tiles (token_tiles_for: 1, 9, 17, 33 for 1, 2, 4, 8).
constexpr int fewest_pass_tokens(int tiles) {
  int tokens = 1;
  while (token_tiles_for(tokens) != tiles) ++tokens;
  return tokens;
}
// Where even the fewest tokens of a pass of kTiles tiles do not fit, shared_input_pass never
// chooses shared memory, so no kernel is compiled for it (rows of 2048 values or more: one tile
// only, 5 kernels a format where there were 8).
template <int kK, MatrixFormat F, int kTiles = 1>
constexpr bool can_share_input() {
  return SharedRowsOf<kK, F>::kWholeGroups && !(F == MatrixFormat::fp8 && kK > 4096) &&
         fewest_pass_tokens(kTiles) * SharedRowsOf<kK, F>::kSharedRowBytes <= kMaxSharedInputBytes;
}
template <int kK, MatrixFormat F>
bool shared_input_pass(int tokens) {
  return can_share_input<kK, F>() && tokens * SharedRowsOf<kK, F>::kSharedRowBytes <= kMaxSharedInputBytes;
}

// One pass of n tokens (at most 8 · kTiles) over an [rows, kK] matrix in format F, its token rows
// from shared memory where shared_input_pass says so. kPairs: gemv_quant_kernel's.
template <int kN, int kK, LinearOut kOut, MatrixFormat F, int kTiles, bool kPairs = false, typename Rows>
void launch_gemv_quant_pass(const bf16* x, const void* matrix, typename LinearOutType<kOut>::type* y, int n,
                            cudaStream_t stream, Rows rows) {
  if constexpr (can_share_input<kK, F, kTiles>()) {
    if (shared_input_pass<kK, F>(n)) {
      launch_gemv_quant<kN, kK, kOut, F, QuantPassShape<kK, F, kTiles, true>, Rows, kPairs>(x, matrix, y, n, stream, rows);
      return;
    }
  }
  launch_gemv_quant<kN, kK, kOut, F, QuantPassShape<kK, F, kTiles, false>, Rows, kPairs>(x, matrix, y, n, stream, rows);
}

// The GEMV over an [rows, kK] matrix in format F, outputs kN apart: passes of up to 64 tokens.
template <int kN, int kK, LinearOut kOut, MatrixFormat F, typename Rows = FixedRows<kN>>
void linear_quant(const bf16* in, const void* matrix, typename LinearOutType<kOut>::type* out, int tokens,
                  cudaStream_t stream, Rows rows = {}) {
  for (int done = 0; done < tokens; done += kStreamPassTokens) {
    const int n = min_int(kStreamPassTokens, tokens - done);
    with_token_tiles(n, [&](auto tiles) {
      launch_gemv_quant_pass<kN, kK, kOut, F, decltype(tiles)::value>(in + static_cast<long long>(done) * kK, matrix,
                                                                      out + static_cast<long long>(done) * kN, n,
                                                                      stream, rows);
    });
  }
}

// Whether a matrix in formats F0 | F1 gets a one-launch kernel: where its tail takes more bytes a
// value than its head, as llama-quantize's mixes bump attn_v (q | k | v: Q4_K_M's Q4_K | Q6_K,
// Q5_K_M's Q5_K | Q6_K, Q3_K_M's Q3_K | Q5_K or Q4_K, Q2_K's Q2_K | Q4_K, and where rows are not
// whole super-blocks their fallbacks, Q5_0 | Q8_0, Q5_1 | Q8_0). Other pairs take a launch a part
// (the same sums): a kernel for every pair made test_linear.cu take 449 s to compile on a 2-core
// build machine (2026-12-02).
template <MatrixFormat F0, MatrixFormat F1>
constexpr bool kPartsKernel = matrix_bytes(F1, 1, kQ4kSuperValues) > matrix_bytes(F0, 1, kQ4kSuperValues);

// One token tile over a GpuMatrix in two formats in one launch (gemv_quant_parts_kernel), where
// both parts' blocks are alike (and kPartsKernel); false where they are not (then each part takes
// its own launch). The token rows come from shared memory where both parts' would, else from
// global memory for both: the same sums either way.
template <int kN, int kK, LinearOut kOut, MatrixFormat F0, MatrixFormat F1>
bool launch_gemv_quant_parts(const bf16* in, const GpuMatrix& w, typename LinearOutType<kOut>::type* out, int tokens,
                             cudaStream_t stream) {
  if constexpr (!kPartsKernel<F0, F1> ||
                QuantPassShape<kK, F0, 1, false>::kThreads != QuantPassShape<kK, F1, 1, false>::kThreads) {
    return false;
  } else {
    const auto launch = [&](auto shared) {
      constexpr bool kShared = decltype(shared)::value;
      using Shape0 = QuantPassShape<kK, F0, 1, kShared>;
      using Shape1 = QuantPassShape<kK, F1, 1, kShared>;
      constexpr auto kernel = gemv_quant_parts_kernel<kN, kK, kOut, F0, Shape0, F1, Shape1>;
      const int blocks = ceil_div(w.split, 16) + ceil_div(kN - w.split, 16);
      KILN_LAUNCH(kernel, dim3(blocks), Shape0::kThreads, kShared ? tokens * Shape0::kSharedRowBytes : 0, stream, in,
                  static_cast<const unsigned char*>(w.data), static_cast<const unsigned char*>(w.tail), out, tokens,
                  w.split);
    };
    if constexpr (can_share_input<kK, F0>() && can_share_input<kK, F1>()) {
      if (shared_input_pass<kK, F0>(tokens) && shared_input_pass<kK, F1>(tokens)) {
        launch(BoolConstant<true>{});
        return true;
      }
    }
    launch(BoolConstant<false>{});
    return true;
  }
}

// The GEMV over a GpuMatrix in two formats (GpuMatrix::split): rows [0, split) and the tail each
// as a matrix of their own, their outputs side by side in `out`; in one launch for a pass of one
// token tile (decode) where both parts' blocks are alike.
template <shape::linear S>
void linear_quant_parts(const bf16* in, const GpuMatrix& w, typename LinearOutType<S.out>::type* out, int tokens,
                        cudaStream_t stream) {
  if (tokens <= 8) {
    bool done = false;
    with_block_format<S.k, true>(w.format, [&](auto f0) {
      with_block_format<S.k, true>(w.tail_format, [&](auto f1) {
        done = launch_gemv_quant_parts<S.n, S.k, S.out, decltype(f0)::value, decltype(f1)::value>(in, w, out, tokens,
                                                                                                   stream);
      });
    });
    if (done) return;
  }
  with_block_format<S.k, true>(w.format, [&](auto f) {
    linear_quant<S.n, S.k, S.out, decltype(f)::value>(in, w.data, out, tokens, stream, RuntimeRows{w.split});
  });
  with_block_format<S.k, true>(w.tail_format, [&](auto f) {
    linear_quant<S.n, S.k, S.out, decltype(f)::value>(in, w.tail, out + w.split, tokens, stream, RuntimeRows{S.n - w.split});
  });
}

}  // namespace detail

// The decode linear op over any GpuMatrix: passes of up to 64 tokens, each reading the weights once.
// Only a weight stacked from pieces (shape::linear::stacked: q | k | v, gate | up) may be in two
// formats (the loader splits no other: runtime/model/weight_loader.cpp), so only its op
// instantiates linear_quant_parts' kernels. leave: as the bf16 linear's (only bf16 rows split
// their sums through scratch; the quantized GEMVs empty it).
template <shape::linear S>
void linear(const bf16* in, GpuMatrix weight, typename detail::LinearOutType<S.out>::type* out, int tokens,
            float* scratch, PendingSums* leave, cudaStream_t stream) {
  if (leave != nullptr) *leave = {};
  if constexpr (S.stacked) {
    if (weight.split > 0) {
      detail::linear_quant_parts<S>(in, weight, out, tokens, stream);
      return;
    }
  }
  if constexpr (!S.rank_slice) {  // a tensor-parallel rank's slice is bf16 rows (no kernel for blocks)
    const bool quantized = detail::with_block_format<S.k>(weight.format, [&](auto f) {
      detail::linear_quant<S.n, S.k, S.out, decltype(f)::value>(in, weight.data, out, tokens, stream);
    });
    if (quantized) return;
  }
  linear<S>(in, static_cast<const bf16*>(weight.data), out, tokens, scratch, leave, stream);
}

template <shape::linear S>
void linear(const bf16* in, GpuMatrix weight, typename detail::LinearOutType<S.out>::type* out, int tokens,
            float* scratch, cudaStream_t stream) {
  linear<S>(in, weight, out, tokens, scratch, nullptr, stream);
}

}  // namespace kiln
