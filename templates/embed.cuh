// Token embedding lookup: x[t, :] = table[token_ids[t], :] as fp32 (the residual stream).
// Tensor parallelism splits the vocabulary: rank r holds rows [r·vocab, (r+1)·vocab) of the whole
// table, writes zeros for the other ranks' tokens, and the ranks' rows are summed after (all_reduce).
// Reference: ref::embed.
#pragma once

#include "templates/common.cuh"

namespace kiln {

namespace detail {

// One block per token; each thread moves kVec values per step.
template <int kVocab, int kDim, int kVec, int kThreads>
__global__ void __launch_bounds__(kThreads) embed_kernel(const int* __restrict__ token_ids,
                                                         const bf16* __restrict__ table, float* __restrict__ x,
                                                         int first_token) {
  pdl_wait_and_release();
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

}  // namespace kiln
