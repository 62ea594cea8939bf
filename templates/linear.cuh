// Decode projections (ref::linear; prefill runs cuBLASLt, runtime/cuda/gemm.hpp): out[t, n] (=|+=)
// Σ_k in[t, k] · weight[n, k] for a small batch of tokens. weight is row-major [n, k] bf16;
// accumulation is fp32.
//
// The weight matrix is streamed once per call, so this kernel is bound by memory bandwidth. It
// uses the tensor cores (mma.sync m16n8k16) so that the token count costs nothing but registers:
// a warp owns 16 weight rows; per step of 32 columns each lane loads 16 contiguous bytes of two
// rows (row g and g + 8, columns 8q..8q+7) and 16 bytes of the input of token g at the same
// columns. The order of the k terms inside a dot product is free, so the lane's 8 columns are fed
// to the mma as if they were its k slots (2q, 2q+1, 2q+8, 2q+9) of two consecutive k16 steps —
// the same permutation on the weight side and the token side. Up to 8 tokens per n8 tile and up
// to 8 tiles per pass (64 tokens) stay in registers; more tokens take further passes.
//
// Warps split the rows (kWarpsN row tiles per block) and the columns (kWarpsK interleaved column
// steps); a block sums its column-splits in shared memory in a fixed order (deterministic).
//
#pragma once

#include "templates/blocks/mma.cuh"
#include "templates/blocks/stream_rows.cuh"
#include "templates/common.cuh"
#include "templates/gemv_plan.hpp"
#include "templates/pending_sums.hpp"
#include "templates/silu_mul.cuh"

namespace kiln {

namespace detail {

template <LinearOut kOut>
struct LinearOutType { using type = float; };
template <>
struct LinearOutType<LinearOut::store_bf16> { using type = bf16; };

// One output of the linear op: stored as bf16, added into the fp32 residual, or stored as fp32.
template <LinearOut kOut>
__device__ __forceinline__ void store_linear_out(typename LinearOutType<kOut>::type* o, float v) {
  if constexpr (kOut == LinearOut::store_bf16) {
    *o = __float2bfloat16_rn(v);
  } else if constexpr (kOut == LinearOut::add_f32) {
    *o += v;
  } else {
    *o = v;
  }
}

// Launch geometry from the shape alone (kTokenTiles: n8 tiles of tokens in this pass; kSMs: the
// target's SM count, shape::linear::sms, which only sizes the split: any GPU runs it), in the
// narrow or the wide plan (gemv_plan.hpp). The last three parameters override the narrow plan's
// choices (0: automatic); the benchmark uses them to compare.
template <int kN, int kK, int kSMs, int kTokenTiles, bool kWide = false, int kWarpsNSet = 0, int kWarpsKSet = 0,
          int kUnrollSet = 0>
struct GemvShape {
  static constexpr GemvPlan kPlan = gemv_plan(kN, kK, kSMs);
  static constexpr int kTokenTileCount = kTokenTiles;
  static constexpr int kVec = vec_width(kK, 2);          // elements per load: 8 (16 bytes) when kK % 8 == 0
  static constexpr int kSteps = kPlan.steps;
  static constexpr int kRowTiles = kPlan.row_tiles;
  static constexpr int kWarpsN = kWide ? kPlan.wide_warps_n : kWarpsNSet > 0 ? kWarpsNSet : kPlan.warps_n;
  static constexpr int kWarpsK = kWarpsKSet > 0 ? kWarpsKSet : kPlan.warps_k;   // splits of a row tile, all blocks
  static constexpr int kBlockWarpsK = kWide ? kPlan.wide_warps_k : kWarpsK;    // of them in one block
  static constexpr int kGroups = kWarpsK / kBlockWarpsK;                         // blocks along the columns
  static constexpr int kRowBlocks = ceil_div(kRowTiles, kWarpsN);
  static constexpr int kWarps = kWarpsN * kBlockWarpsK;
  static constexpr int kThreads = kWarps * 32;
  // Column steps per load group (a warp keeps one group in flight while it multiplies the previous
  // one): more bytes in flight, bounded by registers. At one token tile, 4 steps take ~117
  // registers a thread and 2 take ~70 (ptxas 13.0, sm_90a; the first two groups' weights held at
  // the wait): an SM holds 16 warps of the one, 24 of the other. Where a warp's split is at most 4
  // steps, 2-step groups issue its loads about as early, so when the blocks outnumber what 4 steps
  // let the SMs hold at once but not what 2 do, 2 run them in one wave instead of two: Qwen3-0.6B's
  // gate_up (384 blocks of 8 warps, 4 steps a warp) 9.70 -> 8.70 µs at one token, the model's step
  // 1.9% shorter at batch 8 (H100). Longer splits keep 4, whose deeper groups are what the kernel
  // requests before its PDL wait: Llama-3.1-8B's qkv and gate_up at 2 made its step 1.2% longer
  // (bench/RESULTS.md, 2026-12-06).
  static constexpr int kStepsPerWarp = ceil_div(kSteps, kWarpsK);
  static constexpr int kRowBlocksPerSm4 = max_int(1, 16 / kWarps), kRowBlocksPerSm2 = max_int(1, 24 / kWarps);
  static constexpr bool kOneWaveAtTwo = kTokenTiles == 1 && !kWide && kStepsPerWarp <= 4 &&
                                        kRowBlocks > kRowBlocksPerSm4 * kSMs && kRowBlocks <= kRowBlocksPerSm2 * kSMs;
  static constexpr int kUnroll = kUnrollSet > 0 ? kUnrollSet : kOneWaveAtTwo ? 2 : max_int(1, 4 / kTokenTiles);
  static_assert(kThreads <= 1024, "gemv: at most 1024 threads per block");
  static_assert(!kWide || (kWarpsNSet == 0 && kWarpsKSet == 0), "gemv: the wide plan takes no overrides");
};

// The wide plan serves passes of at least this many token tiles (24+ tokens): below, the inputs
// are small enough that every block reading them costs less than the partial sums' round trip.
constexpr int kGemvWideTokenTiles = 4;

// ---- GEMV inputs ----
// What the kernel multiplies, per token. An input type supplies
//   Row                        what a thread keeps of its token's row between loads
//   rows<kTiles, kThreads>(tokens, g, rows)
//                              the block's prologue (every thread calls it; it may synchronize),
//                              then the Row of token j·8 + g of each tile j (clamped to a real token)
//   Raw fetch(row, col, valid) the loads behind the 8 input values of columns col..col+7, with
//                              zeros where not `valid` or at or past kK
//   uint4 convert(raw, row)    those 8 values as the mma takes them: four bf16x2 registers in
//                              column order (zeros stay zeros)
// The kernel issues a group's fetches before it multiplies the previous group and converts them
// after, so that the loads of a computed input are in flight together and overlap the mmas.
// kVec (elements per access) is the GEMV's: every row start and every chunk is aligned to it.
// Only the plain bf16 input is used: inputs computed on load (silu(gate)·up, RMSNorm of the
// residual) were built and measured on an H200 and cost more than the launch they saved, since
// every block recomputes them (bench/RESULTS.md, 2026-11-21).

// The rows of a bf16 matrix [tokens, kK]: the plain GEMV.
template <int kK, int kVec>
struct Bf16Input {
  const bf16* in;
  using Row = const bf16*;
  using Raw = uint4;
  template <int kTiles, int kThreads>
  __device__ __forceinline__ void rows(int tokens, int g, Row (&rows)[kTiles]) const {
#pragma unroll
    for (int j = 0; j < kTiles; ++j) rows[j] = in + static_cast<long long>(min_int(j * 8 + g, tokens - 1)) * kK;
  }
  __device__ __forceinline__ Raw fetch(Row row, int col, bool valid) const {
    return load_row_chunk<kK, kVec, RowLoad::after_wait>(row, col, valid);
  }
  __device__ __forceinline__ uint4 convert(const Raw& raw, Row) const { return raw; }
};

// The weight row of row r (0..15) of the 16-row tile `tile`: tile·16 + r. With paired rows (kPairs:
// linear_act.cuh's SwiGLU over gate | up stacked, kN = 2·dim) a tile's rows 0-7 are the gate rows
// tile·8 + r and its rows 8-15 the up rows of the same 8 features, so that a lane's C fragment holds
// a feature's gate sums (values 0, 1: row g) beside its up sums (values 2, 3: row g + 8). The plan
// is the shape's either way (the same row tiles and splits): each row's sum is the same float sum.
template <int kN, bool kPairs>
__host__ __device__ constexpr int tile_row(int tile, int r) {
  return kPairs ? (r < 8 ? 0 : kN / 2) + tile * 8 + r % 8 : tile * 16 + r;
}
// Whether that row is in the matrix (the last tile's may not be): paired, whether its feature is.
template <int kN, bool kPairs>
__host__ __device__ constexpr bool tile_row_in(int tile, int r) {
  return kPairs ? tile * 8 + r % 8 < kN / 2 : tile * 16 + r < kN;
}

// Block (blockIdx.x, blockIdx.y): row tiles blockIdx.x · kWarpsN + wn, column splits
// blockIdx.y · kBlockWarpsK + (its warps' splits). With one group of splits the block adds them
// into `out`; with several (the wide plan) it writes them to `partials` [kWarpsK][tokens][kN] for
// gemv_sum_splits_kernel. kPairs (one group of splits only): the rows in gate | up pairs
// (tile_row), and `out` the [tokens, kN / 2] rows of silu(gate) · up (linear_act.cuh).
template <int kN, int kK, LinearOut kOut, typename Shape, typename Input, bool kPairs = false>
__global__ void __launch_bounds__(Shape::kThreads)
    gemv_kernel(const Input input, const bf16* __restrict__ weight,
                typename LinearOutType<kOut>::type* __restrict__ out, float* __restrict__ partials, int tokens) {
  static_assert(!kPairs || (Shape::kGroups == 1 && kOut == LinearOut::store_bf16 && kN % 2 == 0),
                "gemv: SwiGLU's paired rows need every split in the block and bf16 gate | up rows");
  constexpr int T = Shape::kTokenTileCount, U = Shape::kUnroll, WK = Shape::kWarpsK, WKB = Shape::kBlockWarpsK;
  __shared__ float partial[Shape::kGroups == 1 ? Shape::kWarps : 1][128];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wn = warp / WKB, wk = blockIdx.y * WKB + warp % WKB;
  const int g = lane / 4, q = lane % 4;
  const int tile = blockIdx.x * Shape::kWarpsN + wn;
  const int row0 = tile_row<kN, kPairs>(tile, g), row1 = tile_row<kN, kPairs>(tile, g + 8);
  const bool in0 = tile_row_in<kN, kPairs>(tile, g), in1 = tile_row_in<kN, kPairs>(tile, g + 8);
  // rows past the matrix read as zeros (from a row inside it)
  const bf16* w0 = weight + static_cast<long long>(kPairs ? (in0 ? row0 : 0) : min(row0, kN - 1)) * kK;
  const bf16* w1 = weight + static_cast<long long>(kPairs ? (in1 ? row1 : 0) : min(row1, kN - 1)) * kK;

  float acc[T][4];
#pragma unroll
  for (int j = 0; j < T; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;

  // One group = U column steps of this warp (steps s0, s0 + WK, ...). The next group's loads are
  // issued before the current group's mmas, so a warp always has one group in flight.
  struct Group {
    uint4 a0[U], a1[U];
    typename Input::Raw raw[U][T];  // the inputs as loaded
    uint4 b[U][T];                  // the inputs as the mma takes them
  };
  typename Input::Row x_rows[T];  // token rows past `tokens` read as zeros
  auto load_weights = [&](int s0, Group& grp) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int step = s0 + u * WK;
      const int col = step * 32 + q * 8;
      const bool step_valid = step < Shape::kSteps;
      grp.a0[u] = load_row_chunk<kK, Shape::kVec, RowLoad::streaming>(w0, col, step_valid && in0);
      grp.a1[u] = load_row_chunk<kK, Shape::kVec, RowLoad::streaming>(w1, col, step_valid && in1);
    }
  };
  auto fetch_inputs = [&](int s0, Group& grp) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int step = s0 + u * WK;
      const int col = step * 32 + q * 8;
      const bool step_valid = step < Shape::kSteps;
#pragma unroll
      for (int j = 0; j < T; ++j) grp.raw[u][j] = input.fetch(x_rows[j], col, step_valid && j * 8 + g < tokens);
    }
  };
  auto convert_inputs = [&](Group& grp) {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int j = 0; j < T; ++j) grp.b[u][j] = input.convert(grp.raw[u][j], x_rows[j]);
  };
  auto mma_group = [&](const Group& grp) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int j = 0; j < T; ++j) mma_row_chunk(acc[j], grp.a0[u], grp.a1[u], grp.b[u][j]);
    }
  };
  Group current, second;
  // The first two groups' weights are requested before the input's prologue, which then overlaps
  // their latency, and before the wait for the kernel before (common.cuh: weights are never
  // written), whose last blocks they overlap. Two: before the wait no input is held, so the second
  // group's weights take registers the loop holds inputs in later; the loop's first pass is
  // written out here, with the second group already on its way (the quantized GEMV's kEarlySecond,
  // linear_quant.cuh; every shape keeps its waves: kOneWaveAtTwo above). Against one group:
  // Llama-3.2-1B's step 1.7% shorter at batch 1, Qwen3-0.6B's 1.9% at batch 8, the same bits
  // (H100, bench/RESULTS.md 2026-12-07 sixty-third session).
  const bool has_second = wk + WK * U < Shape::kSteps;
  if (wk < Shape::kSteps) load_weights(wk, current);
  if (has_second) load_weights(wk + WK * U, second);
  pdl_release_and_wait();
  input.template rows<T, Shape::kThreads>(tokens, g, x_rows);
  if (wk < Shape::kSteps) {
    fetch_inputs(wk, current);
    convert_inputs(current);
    if (has_second) fetch_inputs(wk + WK * U, second);
    mma_group(current);
    if (has_second) {
      convert_inputs(second);
      current = second;
    }
  }
  // Not unrolled: a fully unrolled loop lets the compiler sink every load down to its mma.
#pragma unroll 1
  for (int s0 = wk + WK * U; s0 < Shape::kSteps; s0 += WK * U) {
    Group next;
    const bool more = s0 + WK * U < Shape::kSteps;
    if (more) {
      load_weights(s0 + WK * U, next);
      fetch_inputs(s0 + WK * U, next);
    }
    mma_group(current);
    if (more) {
      convert_inputs(next);
      current = next;
    }
  }

  if constexpr (Shape::kGroups > 1) {
    // Lane (g, q)'s c-th value is row g + 8·(c / 2), token 2q + c % 2 of the tile (mma.cuh's C).
#pragma unroll
    for (int j = 0; j < T; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int n = tile * 16 + g + 8 * (c / 2), t = j * 8 + 2 * q + c % 2;
        if (n < kN && t < tokens) partials[(static_cast<long long>(wk) * tokens + t) * kN + n] = acc[j][c];
      }
    }
  } else if constexpr (kPairs) {
    // Each feature's gate and up sums as sum_column_splits adds them, then silu(gate) · up.
#pragma unroll
    for (int j = 0; j < T; ++j) {
      sum_column_splits_gated<Shape::kWarpsN, WK, Shape::kThreads>(
          partial, acc[j], [&](int block_feature, int token, float gate, float up) {
            const int f = blockIdx.x * Shape::kWarpsN * 8 + block_feature, t = j * 8 + token;
            if (f < kN / 2 && t < tokens) {
              out[static_cast<long long>(t) * (kN / 2) + f] = __float2bfloat16_rn(silu_mul_of_sums(gate, up));
            }
          });
    }
  } else {
    // Sum the column-splits of each row tile, one token tile at a time, in a fixed order.
#pragma unroll
    for (int j = 0; j < T; ++j) {
      sum_column_splits<Shape::kWarpsN, WK, Shape::kThreads>(partial, acc[j], [&](int block_row, int token, float v) {
        const int n = blockIdx.x * Shape::kWarpsN * 16 + block_row;
        const int t = j * 8 + token;
        if (n < kN && t < tokens) {
          store_linear_out<kOut>(out + static_cast<long long>(t) * kN + n, v);
        }
      });
    }
  }
}

// The wide plan's second step: out[t, n] (=|+=) Σ_wk partials[wk][t][n], splits in order from 0.0f
// (sum_column_splits' order: the narrow plan's bits).
template <int kN, int kWK, LinearOut kOut>
__global__ void __launch_bounds__(256)
    gemv_sum_splits_kernel(const float* __restrict__ partials, typename LinearOutType<kOut>::type* __restrict__ out,
                           int tokens) {
  pdl_release_and_wait();
  const long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x, count = static_cast<long long>(tokens) * kN;
  if (i >= count) return;
  float v = 0.0f;
#pragma unroll
  for (int k = 0; k < kWK; ++k) v += partials[k * count + i];
  store_linear_out<kOut>(out + i, v);
}

// gemv_sum_splits_kernel over `tokens` rows (the wide plan's and the batched GEMV's wide form's).
template <int kN, int kWK, LinearOut kOut>
inline void launch_gemv_sum_splits(const float* partials, typename LinearOutType<kOut>::type* out, int tokens,
                                   cudaStream_t stream) {
  auto sum = gemv_sum_splits_kernel<kN, kWK, kOut>;
  KILN_LAUNCH(sum, ceil_div(tokens * kN, 256), 256, 0, stream, partials, out, tokens);
}

// One pass of at most 8 · Shape::kTokenTileCount tokens of `input`; partials: the wide plan's
// scratch (gemv_scratch_floats), unused by the narrow plan.
// add_splits: false leaves the wide plan's partial sums in `partials` (PendingSums). kPairs:
// gemv_kernel's.
template <int kN, int kK, LinearOut kOut, typename Shape, typename Input, bool kPairs = false>
inline void launch_gemv_input(const Input& input, const bf16* weight, typename LinearOutType<kOut>::type* out,
                              float* partials, int tokens, cudaStream_t stream, bool add_splits = true) {
  auto kernel = gemv_kernel<kN, kK, kOut, Shape, Input, kPairs>;
  KILN_LAUNCH(kernel, dim3(Shape::kRowBlocks, Shape::kGroups), Shape::kThreads, 0, stream, input, weight, out,
              partials, tokens);
  if (!add_splits) return;
  if constexpr (Shape::kGroups > 1) launch_gemv_sum_splits<kN, Shape::kWarpsK, kOut>(partials, out, tokens, stream);
}

}  // namespace detail

}  // namespace kiln

// The batched GEMV (passes of 9+ tokens), which needs the definitions above.
#include "templates/gemv_batched.cuh"

namespace kiln {

namespace detail {

// What gemv_pass launched: nothing (kPairs on a path that sums the splits in a second kernel), a
// complete pass, or one whose column splits it left in scratch (sum_splits false).
enum class GemvPassRun { not_run, complete, splits_in_scratch };

// One pass of n (1..kStreamPassTokens) tokens, kTiles token tiles, over bf16 rows: the batched
// GEMV (gemv_batched.cuh) where the GPU's shared memory holds its stages, in its narrow form where
// the shape has a block for every SM, in its wide form where it has fewer row tiles than SMs;
// otherwise the GEMV, on its wide plan from kGemvWideTokenTiles token tiles where that pays
// (GemvPlan::wide). The wide form and a plan of several column groups sum their splits through
// `scratch` in a second kernel, or leave them there where sum_splits is false (PendingSums).
// kPairs (linear_act.cuh): gate | up rows in pairs with SwiGLU's epilogue, `out` the [n, kN / 2]
// activations; it launches only on the paths that add every split in their blocks, and nothing
// (not_run) on the others. linear<S> and linear_act<S> both choose here, so the fused op takes
// the plan, splits and sum order of the pass it replaces.
template <int kN, int kK, LinearOut kOut, int kSMs, int kTiles, bool kPairs = false>
GemvPassRun gemv_pass(const bf16* in, const bf16* weight, typename LinearOutType<kOut>::type* out, float* scratch,
                      int n, bool sum_splits, cudaStream_t stream) {
  if constexpr (use_batched_gemv<kN, kK, kSMs, kTiles>()) {
    using Shape = BatchedGemvShape<kN, kK, kSMs, kTiles>;
    if (device_smem_fits(Shape::kSmemBytes)) {
      launch_gemv_batched<kN, kK, kOut, kSMs, kTiles, Shape, kPairs>(in, weight, out, nullptr, n, stream);
      return GemvPassRun::complete;
    }
  }
  if constexpr (use_batched_gemv_wide<kN, kK, kSMs, kTiles>()) {
    using Wide = BatchedGemvShape<kN, kK, kSMs, kTiles, 0, 0, 0, true>;
    if (device_smem_fits(Wide::kSmemBytes)) {
      if constexpr (kPairs) {
        return GemvPassRun::not_run;
      } else {
        launch_gemv_batched<kN, kK, kOut, kSMs, kTiles, Wide>(in, weight, out, scratch, n, stream, sum_splits);
        return sum_splits ? GemvPassRun::complete : GemvPassRun::splits_in_scratch;
      }
    }
  }
  constexpr bool kWide = gemv_plan(kN, kK, kSMs).wide && kTiles >= kGemvWideTokenTiles;
  using Shape = GemvShape<kN, kK, kSMs, kTiles, kWide>;
  using Input = Bf16Input<kK, vec_width(kK, 2)>;
  if constexpr (kPairs && Shape::kGroups > 1) {
    return GemvPassRun::not_run;
  } else {
    launch_gemv_input<kN, kK, kOut, Shape, Input, kPairs>(Input{in}, weight, out, scratch, n, stream, sum_splits);
    return Shape::kGroups > 1 && !sum_splits ? GemvPassRun::splits_in_scratch : GemvPassRun::complete;
  }
}

}  // namespace detail

// Decode scratch floats linear<S> takes for up to max_batch tokens (the generator's
// kDecodeScratchFloats covers it; kernels.cu asserts so).
template <shape::linear S>
constexpr long long linear_scratch_floats(int max_batch) {
  return gemv_scratch_floats(S.n, S.k, S.sms, max_batch);
}

// out is bf16* for LinearOut::store_bf16, float* otherwise. Any token count: passes of up to
// kStreamPassTokens tokens, each reading the weights once, on detail::gemv_pass's path (partial
// sums through `scratch`, linear_scratch_floats, where it takes the batched GEMV's wide form or
// the GEMV's wide plan). Every path gives every token the same bits.
//
// leave (residual outputs, LinearOut::add_f32): where the call is one pass whose path sums the
// splits through `scratch`, those sums are left there, not added into `out`, and *leave says so
// (PendingSums; rmsnorm adds them); otherwise *leave is emptied and `out` is complete.
template <shape::linear S>
void linear(const bf16* in, const bf16* weight, typename detail::LinearOutType<S.out>::type* out, int tokens,
            float* scratch, PendingSums* leave, cudaStream_t stream) {
  constexpr int kN = S.n, kK = S.k;
  static_assert(kN > 0 && kK > 0 && S.sms > 0, "linear: sizes must be positive");
  if (leave != nullptr) *leave = {};
  // Whether a path that sums the splits through scratch leaves them there: residual outputs in one pass.
  const bool may_leave = S.out == LinearOut::add_f32 && leave != nullptr && tokens <= detail::kStreamPassTokens;
  auto left_in_scratch = [&](int n) {
    if constexpr (S.out == LinearOut::add_f32) *leave = {out, scratch, gemv_plan(kN, kK, S.sms).warps_k, n, kN};
  };
  for (int done = 0; done < tokens; done += detail::kStreamPassTokens) {
    const int n = detail::min_int(detail::kStreamPassTokens, tokens - done);
    detail::with_token_tiles(n, [&](auto tiles) {
      const auto run = detail::gemv_pass<kN, kK, S.out, S.sms, decltype(tiles)::value>(
          in + static_cast<long long>(done) * kK, weight, out + static_cast<long long>(done) * kN, scratch, n,
          !may_leave, stream);
      if (run == detail::GemvPassRun::splits_in_scratch) left_in_scratch(n);
    });
  }
}

template <shape::linear S>
void linear(const bf16* in, const bf16* weight, typename detail::LinearOutType<S.out>::type* out, int tokens,
            float* scratch, cudaStream_t stream) {
  linear<S>(in, weight, out, tokens, scratch, nullptr, stream);
}

}  // namespace kiln

// The same op over a GpuMatrix, whose weights may be kept quantized.
#include "templates/linear_quant.cuh"
