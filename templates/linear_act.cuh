// gate_up_proj and SwiGLU at decode in one launch (the fused op linear_act, codegen/fuse.cpp):
// act[t, i] = silu(gate[t, i]) · up[t, i] with gate | up = in · gate_up_projᵀ, where the GEMV's
// blocks hold each feature's gate and up rows side by side (linear.cuh's tile_row: a 16-row tile is
// 8 gate rows and the 8 up rows of the same features), so that the block that sums a feature's
// gate and up writes its activation and never the gate | up rows. The sums are the plain GEMV's
// (the plan is the gate | up matrix's, the same splits in the same order) and the activation is
// silu_mul's of the bf16-rounded rows (silu_mul_of_sums): the bits of linear, then silu_mul.
//
// Why: the separate silu_mul was a launch of its own every layer. Without it a decode step is 1.05-1.4
// µs a layer shorter at batch 1 and 1.4-2.8 at batch 64, the same tokens (H100, Qwen3-0.6B batch 1
// 0.7829 -> 0.7481 ms; bench/RESULTS.md 2026-12-07). The prefill keeps cuBLASLt and silu_mul (its
// parts).
//
// A matrix kept in GGUF blocks or FP8 takes the quantized GEMV (linear_quant.cuh) with the same
// epilogue for passes of one token tile (1-8 tokens: a local user's decode, and FP8's). Where a
// pass's path sums the column splits through scratch in a second kernel (the wide plan's and the
// batched GEMV's wide form), for a quantized matrix past 8 tokens or in two formats, and past one
// GEMV pass, the op runs its parts: linear into gate_up, then silu_mul.
#pragma once

#include "templates/linear.cuh"
#include "templates/linear_quant.cuh"
#include "templates/silu_mul.cuh"

namespace kiln {

namespace detail {

// The gate | up projection of a linear_act op as the linear op it fuses.
template <shape::linear_act S>
constexpr shape::linear gate_up_linear() {
  return shape::linear{.n = S.n, .k = S.k, .out = LinearOut::store_bf16, .sms = S.sms, .stacked = S.stacked,
                       .rank_slice = S.rank_slice};
}

}  // namespace detail

// Decode scratch floats linear_act<S> takes (its parts' linear's, which it may run).
template <shape::linear_act S>
constexpr long long linear_act_scratch_floats(int max_batch) {
  return linear_scratch_floats<detail::gate_up_linear<S>()>(max_batch);
}

// act [tokens, S.dim] = silu(gate) · up of in [tokens, S.k] · weightᵀ, weight bf16 rows [S.n, S.k]
// (gate | up rows, S.n = 2 · S.dim). gate_up [tokens, S.n]: where the op runs its parts, their gate |
// up rows (otherwise left as it was). Instantiates no block format's kernel, as linear<S>'s
// overload for bf16 rows (the kernel tests of bf16 shapes call it: the GpuMatrix overload compiles
// every format's kernels for each shape, half of test_linear_act.cu's).
template <shape::linear_act S>
void linear_act(const bf16* in, const bf16* weight, bf16* gate_up, bf16* act, int tokens, float* scratch,
                cudaStream_t stream) {
  static_assert(S.n == 2 * S.dim, "linear_act: the matrix must be the gate rows, then the up rows, of dim each");
  constexpr shape::linear kGateUp = detail::gate_up_linear<S>();
  if (tokens > 0 && tokens <= detail::kStreamPassTokens) {
    bool fused = false;  // where the pass's path adds every split in its blocks (detail::gemv_pass)
    detail::with_token_tiles(tokens, [&](auto tiles) {
      fused = detail::gemv_pass<S.n, S.k, LinearOut::store_bf16, S.sms, decltype(tiles)::value, true>(
                  in, weight, act, nullptr, tokens, true, stream) != detail::GemvPassRun::not_run;
    });
    if (fused) return;
  }
  linear<kGateUp>(in, weight, gate_up, tokens, scratch, stream);
  silu_mul<shape::silu_mul{.dim = S.dim}>(gate_up, act, tokens, stream);
}

// The same over any GpuMatrix: bf16 rows as above; a matrix kept in GGUF blocks or FP8 codes.
template <shape::linear_act S>
void linear_act(const bf16* in, GpuMatrix weight, bf16* gate_up, bf16* act, int tokens, float* scratch,
                cudaStream_t stream) {
  static_assert(S.n == 2 * S.dim, "linear_act: the matrix must be the gate rows, then the up rows, of dim each");
  if (weight.format == MatrixFormat::bf16 && weight.split == 0) {
    linear_act<S>(in, static_cast<const bf16*>(weight.data), gate_up, act, tokens, scratch, stream);
    return;
  }
  constexpr shape::linear kGateUp = detail::gate_up_linear<S>();
  if constexpr (!S.rank_slice) {  // a tensor-parallel rank's slice is bf16 rows (linear.cuh)
    // One token tile (launch_gemv_quant_pass's 1): the paired quantized GEMV is compiled for that
    // tile count alone, as every further count is each block format's kernel once more.
    if (tokens > 0 && detail::token_tiles_for(tokens) == 1 && weight.split == 0 &&
        detail::with_block_format<S.k>(weight.format, [&](auto f) {
          detail::launch_gemv_quant_pass<S.n, S.k, LinearOut::store_bf16, decltype(f)::value, 1, true>(
              in, weight.data, act, tokens, stream, detail::FixedRows<S.n>{});
        })) {
      return;
    }
  }
  linear<kGateUp>(in, weight, gate_up, tokens, scratch, stream);
  silu_mul<shape::silu_mul{.dim = S.dim}>(gate_up, act, tokens, stream);
}

}  // namespace kiln
