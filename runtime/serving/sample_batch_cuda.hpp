// Launchers of sample_batch.cu (see sample_batch.hpp). All enqueue on `stream` without syncing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/serving/sample_batch.hpp"

namespace kiln {

// Row r's edits are edits[offsets[r], offsets[r + 1]); saved[] receives the logits they replace.
void launch_apply_logit_edits(float* logits, int64_t row_stride, int32_t num_rows, const LogitEdit* edits,
                              const int32_t* offsets, float* saved, cudaStream_t stream);
void launch_restore_logit_edits(float* logits, int64_t row_stride, int32_t num_rows, const LogitEdit* edits,
                                const int32_t* offsets, const float* saved, cudaStream_t stream);
// Row r's mask (mask_rows[r] = k >= 0) is masks[k * token_mask_words(vocab_size), ...); saved[k *
// vocab_size, ...) receives the row's logits. Applied after the edits, restored before them.
void launch_apply_token_masks(float* logits, int64_t row_stride, int32_t num_rows, int32_t vocab_size,
                              const TokenMaskWord* masks, const int32_t* mask_rows, float* saved, cudaStream_t stream);
void launch_restore_token_masks(float* logits, int64_t row_stride, int32_t num_rows, int32_t vocab_size,
                                const int32_t* mask_rows, const float* saved, cudaStream_t stream);
// The logprobs' passes split a row into slices of about this many tokens, at most kLogprobMaxParts
// of them (larger vocabularies take longer slices): logprob_parts(vocab) slices a row.
constexpr int32_t kLogprobSlice = 4096;
constexpr int32_t kLogprobMaxParts = 64;
int32_t logprob_parts(int32_t vocab_size);

// Device scratch of launch_logprobs for num_rows rows of a vocabulary: each row's slices' maxima,
// fp64 sums and top-N candidates ([rows][logprob_parts], [rows][parts][kMaxTopLogprobs]).
struct LogprobScratch {
  float* part_max = nullptr;
  double* part_sum = nullptr;
  TokenLogprob* candidates = nullptr;
};

// For rows that asked (want_logprob, top_logprobs) and sampled fine (out[r].status): out[r].logprob
// of out[r].token and top[r * kMaxTopLogprobs + k], k < top_logprobs, from the (raw) logits.
// scratch: sized for num_rows rows of kLogprobMaxParts slices.
void launch_logprobs(const float* logits, int64_t row_stride, int32_t num_rows, int32_t vocab_size,
                     const SamplerRow* rows, SampleOutput* out, TokenLogprob* top, LogprobScratch scratch,
                     cudaStream_t stream);

}  // namespace kiln
