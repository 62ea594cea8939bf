// Token embedding lookup: x[t, :] = table[token_ids[t], :] as fp32 (the residual stream). The
// table is a GpuMatrix: bf16 rows, or a GGUF file's blocks as the loader keeps
// them (weight_matrix.hpp), decoded to ggml's values (quant_values.cuh); a tied LM head reads the
// same matrix, so the GPU holds the file's bytes once.
// Tensor parallelism splits the vocabulary: rank r holds rows [r·vocab, (r+1)·vocab) of the whole
// table, writes zeros for the other ranks' tokens, and the ranks' rows are summed after (all_reduce).
// Reference: ref::embed.
#pragma once

#include "templates/common.cuh"
#include "templates/quant_values.cuh"
#include "templates/weight_matrix.hpp"

namespace kiln {

namespace detail {

// One block per token; each thread moves kVec values per step.
template <int kVocab, int kDim, int kVec, int kThreads>
__global__ void __launch_bounds__(kThreads) embed_kernel(const int* __restrict__ token_ids,
                                                         const bf16* __restrict__ table, float* __restrict__ x,
                                                         int first_token) {
  pdl_release_and_wait();
  const long long t = blockIdx.x;
  const int id = token_ids[t] - first_token;
  const bool here = id >= 0 && id < kVocab;  // uniform over the block
  const bf16* row = table + static_cast<long long>(here ? id : 0) * kDim;
  float* out = x + t * kDim;
  for (int i = threadIdx.x * kVec; i < kDim; i += kThreads * kVec) {
    float v[kVec] = {};
    if (here) load_bf16<kVec>(row + i, v);
    store_f32<kVec>(out + i, v);
  }
}

// The same from a quantized table: one block per token, one thread per lane chunk (group, lane) of
// the row at a time (quant_values.cuh's decode_chunk).
template <int kVocab, int kDim, MatrixFormat F, int kThreads>
__global__ void __launch_bounds__(kThreads) embed_quant_kernel(const int* __restrict__ token_ids,
                                                               const unsigned char* __restrict__ table,
                                                               float* __restrict__ x, int first_token) {
  pdl_release_and_wait();
  constexpr long long kGroups = quant_row_groups(F, kDim);
  const long long t = blockIdx.x;
  const int id = token_ids[t] - first_token;
  const bool here = id >= 0 && id < kVocab;  // uniform over the block
  float* out = x + t * kDim;
  for (int i = threadIdx.x; i < kGroups * 4; i += kThreads) {
    const auto store = [&](long long col, const auto& v) {  // 8 or 4 values (decode_chunk)
#pragma unroll
      for (int i = 0; i < static_cast<int>(sizeof(v) / sizeof(float)); i += 4) {
        *reinterpret_cast<float4*>(out + col + i) =
            here ? make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    };
    decode_chunk<F>(table, kVocab, kDim, here ? id : 0, i / 4, i % 4, store);
  }
}

template <int kVocab, int kDim, MatrixFormat F>
void launch_embed_quant(const int* token_ids, const void* table, float* x, int first_token, int tokens,
                        cudaStream_t stream) {
  constexpr int kChunks = static_cast<int>(quant_row_groups(F, kDim)) * 4;
  constexpr int kThreads = min_int(256, round_up(kChunks, 32));
  auto kernel = embed_quant_kernel<kVocab, kDim, F, kThreads>;
  KILN_LAUNCH(kernel, tokens, kThreads, 0, stream, token_ids, static_cast<const unsigned char*>(table), x,
              first_token);
}

}  // namespace detail

// token ids must lie in the whole vocabulary: the tokenizer and the scheduler guarantee it. `rank`:
// the tensor-parallel rank whose rows `table` holds (0 without tensor parallelism).
template <shape::embed S>
void embed(const int* token_ids, const bf16* table, float* x, int rank, int tokens, cudaStream_t stream) {
  constexpr int kDim = S.dim;
  static_assert(kDim > 0 && S.vocab > 0, "embed: sizes must be positive");
  if (tokens <= 0) return;
  constexpr int kVec = detail::min_int(detail::vec_width(kDim, 2), 4);  // fp32 side: at most 16 bytes
  constexpr int kThreads = detail::min_int(detail::kElementwiseThreads, detail::round_up(detail::ceil_div(kDim, kVec), 32));
  auto kernel = detail::embed_kernel<S.vocab, kDim, kVec, kThreads>;
  KILN_LAUNCH(kernel, tokens, kThreads, 0, stream, token_ids, table, x, rank * S.vocab);
}

// The same over a GpuMatrix: bf16 rows, or a table the loader kept in a GGUF block format (rows of
// whole blocks; the K-quants: whole super-blocks) or in FP8.
template <shape::embed S>
void embed(const int* token_ids, GpuMatrix table, float* x, int rank, int tokens, cudaStream_t stream) {
  if (tokens <= 0) return;
  const bool blocks = detail::with_block_format<S.dim>(table.format, [&](auto f) {
    detail::launch_embed_quant<S.vocab, S.dim, decltype(f)::value>(token_ids, table.data, x, rank * S.vocab, tokens,
                                                                   stream);
  });
  if (blocks) return;
  embed<S>(token_ids, static_cast<const bf16*>(table.data), x, rank, tokens, stream);
}

}  // namespace kiln
