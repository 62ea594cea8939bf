// Prefill projections through cuBLASLt: out[rows, n] (=|+=) in[rows, k] · weight[n, k]ᵀ with bf16
// operands and fp32 accumulation: the prefill side of the linear op (decode runs our GEMV,
// templates/linear.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <memory>

#include "codegen/op_shapes.hpp"
#include "runtime/core/error.hpp"
#include "runtime/cuda/context.hpp"
#include "runtime/cuda/dequantize_matrix.hpp"
#include "runtime/cuda/quantize_rows.hpp"
#include "templates/fp8_rows.hpp"
#include "templates/weight_matrix.hpp"

namespace kiln::cuda {

// Owns the cuBLASLt handle, its workspace and the chosen algorithms per shape.
class GemmRunner {
 public:
  GemmRunner();
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  void run(const __nv_bfloat16* in, const __nv_bfloat16* weight, void* out, int rows, int n, int k, LinearOut mode,
           cudaStream_t stream);
  // The same for a decode step (cuda::decode_linear): the algorithm is chosen for this row count,
  // split-K allowed, rather than shared with every other count (a sequence's sums then depend on
  // the rows beside it, which the decode allows only past one GEMV pass).
  void run_decode(const __nv_bfloat16* in, const __nv_bfloat16* weight, void* out, int rows, int n, int k,
                  LinearOut mode, cudaStream_t stream);
  // The same over E4M3 operands: the weight [n, k] (rows as stored: k bytes apart) with its scales
  // per 128 × 128 block, the input [rows, k] with its scales per 128 columns of a row
  // (templates/fp8_rows.hpp); n and k as fp8_gemm_shape takes them, rows a multiple of kFp8GemmRows.
  // weight_scale > 0: the weight has that one scale (GpuMatrix::fp8_scale; weight_scales is not
  // read) and each input row's slots hold the row's one scale (those of its first 128 columns are
  // read): cuBLASLt's per-token GEMM.
  void run_fp8(const uint8_t* in, const float* in_scales, const uint8_t* weight, const float* weight_scales,
               float weight_scale, void* out, int rows, int n, int k, LinearOut mode, cudaStream_t stream);

 private:
  void run_bf16(const __nv_bfloat16* in, const __nv_bfloat16* weight, void* out, int rows, int n, int k, LinearOut mode,
                cudaStream_t stream, bool decode);
  struct State;
  std::unique_ptr<State> state_;
};

// The call the generated prefill forward makes for a linear op (codegen/ops.def): out is bf16 for
// LinearOut::store_bf16, fp32 otherwise (added into for add_f32).
template <shape::linear S, typename Out>
void linear(const CudaContext& ctx, const __nv_bfloat16* in, const __nv_bfloat16* weight, Out* out, int tokens) {
  static_assert((S.out == LinearOut::store_bf16) == (sizeof(Out) == 2), "cuda::linear: out type must match S.out");
  ctx.gemm->run(in, weight, out, tokens, S.n, S.k, S.out, ctx.stream);
}

// Whether a decode step of `tokens` rows runs a projection on cuBLASLt rather than our GEMV (the
// generated decode asks where the build decodes more than one GEMV pass: codegen's
// Graph::decode_gemm_past_pass). The GEMV reads the weight once per kGemvPassTokens tokens and
// keeps a sequence's sums in the same order at any batch; cuBLASLt reads it once a step, its sums
// in an order of its own: past ctx.decode_gemm_above rows (--batch-invariant: never), for bf16
// matrices (a quantized one would first be expanded to bf16 in full each step).
// decode_gemm_takes: the matrices it may take (bf16, whole); decode_linear refuses the others.
inline bool decode_gemm_takes(GpuMatrix weight) { return weight.format == MatrixFormat::bf16 && weight.split == 0; }
inline bool decode_on_gemm(const CudaContext& ctx, GpuMatrix weight, int tokens) {
  return tokens > ctx.decode_gemm_above && decode_gemm_takes(weight);
}

// The call the generated decode makes where cuda::decode_on_gemm says so: cuBLASLt with the
// algorithm of this row count (GemmRunner::run_decode).
template <shape::linear S, typename Out>
void decode_linear(const CudaContext& ctx, const __nv_bfloat16* in, GpuMatrix weight, Out* out, int tokens) {
  static_assert((S.out == LinearOut::store_bf16) == (sizeof(Out) == 2), "cuda::decode_linear: out type must match S.out");
  if (!decode_gemm_takes(weight)) {
    fail("internal: decode_linear n=", S.n, " k=", S.k, " was given a matrix cuda::decode_on_gemm refuses");
  }
  ctx.gemm->run_decode(in, static_cast<const __nv_bfloat16*>(weight.data), out, tokens, S.n, S.k, S.out, ctx.stream);
}

// Where the prefill multiplies `weight` in FP8 (an FP8 matrix, and the step's buffers hold FP8
// inputs): those inputs' rows, which the op before the projection may write in place of its bf16
// rows (codegen/fuse.cpp pairs them); empty otherwise. For a projection of fp8_gemm_shape only.
// Scaled per row where the matrix has one scale (GpuMatrix::fp8_scale), else per 128 columns.
inline Fp8Rows fp8_inputs_for(const CudaContext& ctx, GpuMatrix weight) {
  if (weight.format != MatrixFormat::fp8 || ctx.fp8_inputs == nullptr) return {};
  return {ctx.fp8_inputs, ctx.fp8_input_scales, weight.fp8_scale > 0.0f};
}

// The same scaled per 128 columns whatever the matrix: the attention's (codegen's fp8_per_head),
// whose FP8 epilogue sees a token's row one head at a time. A matrix of one scale then multiplies on
// the block-scaled GEMM, its every block holding that scale: slower than the per-token one, but
// it spares a pass over the attention's rows; Qwen3-8B's 2,048-token FP8 prefill 28.66 -> 28.45 ms
// on an H200 (bench/RESULTS.md, eighteenth session).
inline Fp8Rows fp8_head_inputs_for(const CudaContext& ctx, GpuMatrix weight) {
  Fp8Rows rows = fp8_inputs_for(ctx, weight);
  rows.row_scale = false;
  return rows;
}

// The same over a projection as the generated weights hold it: an FP8 matrix of fp8_gemm_shape
// multiplies the inputs quantized to FP8 per 128 columns on the tensor cores' FP8 path
// (templates/fp8_rows.hpp): `in_fp8` where the op before wrote them (fp8_inputs_for), else
// quantized from `in` here; any other quantized matrix is expanded to bf16 rows in ctx.dequantized
// first (the reference's fp32 rows and this bf16 GEMM agree at bf16's precision; the decode GEMV
// reads the blocks themselves).
template <shape::linear S, typename Out>
void linear(const CudaContext& ctx, const __nv_bfloat16* in, Fp8Rows in_fp8, GpuMatrix weight, Out* out, int tokens) {
  if constexpr (fp8_gemm_shape(S.n, S.k)) {
    Fp8Rows rows = fp8_inputs_for(ctx, weight);
    if (rows && tokens > 0) {
      // The output's rows past `tokens` up to the padded count are written too (with the sums of
      // zero inputs): ctx.fp8_inputs is set where every step's buffers hold those rows.
      if (!in_fp8) {
        quantize_rows_fp8(in, tokens, S.k, rows, ctx.stream);
      } else if (in_fp8.row_scale && !rows.row_scale) {
        fail("internal: linear n=", S.n, " k=", S.k, " was given FP8 inputs scaled per row for a block-scaled matrix");
      } else {
        rows.row_scale = in_fp8.row_scale;  // per 128 columns from the attention (fp8_head_inputs_for)
      }
      const auto* matrix = static_cast<const uint8_t*>(weight.data);
      ctx.gemm->run_fp8(rows.codes, rows.scales, matrix,
                        reinterpret_cast<const float*>(matrix + quant_scales_offset(MatrixFormat::fp8, S.n, S.k)),
                        rows.row_scale ? weight.fp8_scale : 0.0f, out, fp8_gemm_rows(tokens), S.n, S.k, S.out,
                        ctx.stream);
      return;
    }
  }
  if (in_fp8) fail("internal: linear n=", S.n, " k=", S.k, " was given FP8 inputs it does not multiply in FP8");
  if (weight.format == MatrixFormat::bf16) {
    linear<S>(ctx, in, static_cast<const __nv_bfloat16*>(weight.data), out, tokens);
    return;
  }
  dequantize_matrix(weight, S.n, S.k, ctx.dequantized, ctx.stream);
  linear<S>(ctx, in, ctx.dequantized, out, tokens);
}

// The prefill's logits (the linear op over the rows that need them, codegen's rows "N"): the first
// `samples` rows, those a token is sampled from (StepBatch::num_samples: one per sequence, so at
// most the build's max_batch, what the decode kernels' scratch holds), as a decode step scores its
// rows: `gemv`, the op's decode kernel, or cuBLASLt where cuda::decode_on_gemm says so; the rest
// (prompt logits) on cuBLASLt. The GEMV reads the weight once, as stored, where cuBLASLt's GEMM of a
// few rows streamed at ~2.2 TB/s (Llama-3.2-1B's 525 MB LM head: 230 µs on an H100) and a quantized
// matrix was first expanded to bf16 in full; and a sampled row's logits have the bits a decode
// step gives that row, whatever else shares the step.
template <shape::linear S, typename Gemv>
void prefill_logits(const CudaContext& ctx, const __nv_bfloat16* in, GpuMatrix weight, float* out, int rows,
                    int samples, Gemv gemv) {
  static_assert(S.out == LinearOut::store_f32, "cuda::prefill_logits: logits are fp32");
  if (samples < 0 || samples > rows) fail("internal: prefill_logits of ", rows, " rows given ", samples, " sample rows");
  if (samples > 0) {
    if (decode_on_gemm(ctx, weight, samples)) {
      decode_linear<S>(ctx, in, weight, out, samples);
    } else {
      gemv(in, weight, out, samples, ctx.scratch, nullptr, ctx.stream);
    }
  }
  const int64_t first = samples;
  if (rows > samples) linear<S>(ctx, in + first * S.k, Fp8Rows{}, weight, out + first * S.n, rows - samples);
}

}  // namespace kiln::cuda
