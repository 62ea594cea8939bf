// CUDA side of sample_batch.hpp: the logit edits and the token masks applied in place before the
// sampler and undone after it, and the raw logprobs (chosen token and top-N) of the restored rows.
// Same float operations as sample_batch_cpu: edits and masks bit for bit, logprobs to the rounding
// of an fp64 sum.
#include "runtime/serving/sample_batch_cuda.hpp"

#include <cfloat>

#include "runtime/core/error.hpp"

namespace kiln {

namespace {

constexpr int kEditThreads = 128;
constexpr int kMaskThreads = 256;
constexpr int32_t kMaskTokensPerBlock = 8 * kMaskThreads;
constexpr int kLogprobThreads = 256;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("CUDA sampler: ", what, ": ", cudaGetErrorString(status));
}

// One block per row; each edit touches its own token, so threads never collide.
__global__ void apply_edits_kernel(float* logits, int64_t row_stride, const LogitEdit* edits, const int32_t* offsets,
                                   float* saved) {
  const int32_t row = blockIdx.x;
  float* x = logits + row * row_stride;
  for (int32_t i = offsets[row] + threadIdx.x; i < offsets[row + 1]; i += blockDim.x) {
    const LogitEdit e = edits[i];
    saved[i] = x[e.token];
    x[e.token] = apply_logit_edit(x[e.token], e);
  }
}

__global__ void restore_edits_kernel(float* logits, int64_t row_stride, const LogitEdit* edits, const int32_t* offsets,
                                     const float* saved) {
  const int32_t row = blockIdx.x;
  float* x = logits + row * row_stride;
  for (int32_t i = offsets[row] + threadIdx.x; i < offsets[row + 1]; i += blockDim.x) x[edits[i].token] = saved[i];
}

// Blocks (row, slice of kMaskTokensPerBlock tokens). A masked row's logits are saved whole (its
// mask's slot of `saved`, vocab floats) and those the mask does not allow become kBannedLogit;
// restore copies the slot back. Whole rows: one coalesced pass, and the same cost whatever the
// mask allows.
__global__ void apply_masks_kernel(float* logits, int64_t row_stride, int32_t vocab, int32_t mask_words,
                                   const TokenMaskWord* masks, const int32_t* mask_rows, float* saved) {
  const int32_t k = mask_rows[blockIdx.x];
  if (k < 0) return;
  float* x = logits + blockIdx.x * row_stride;
  const TokenMaskWord* mask = masks + static_cast<int64_t>(k) * mask_words;
  float* slot = saved + static_cast<int64_t>(k) * vocab;
  const int32_t end = min(vocab, static_cast<int32_t>(blockIdx.y + 1) * kMaskTokensPerBlock);
  for (int32_t t = blockIdx.y * kMaskTokensPerBlock + threadIdx.x; t < end; t += blockDim.x) {
    const float v = x[t];
    slot[t] = v;
    if (!token_allowed(mask, t)) x[t] = kBannedLogit;
  }
}

__global__ void restore_masks_kernel(float* logits, int64_t row_stride, int32_t vocab, const int32_t* mask_rows,
                                     const float* saved) {
  const int32_t k = mask_rows[blockIdx.x];
  if (k < 0) return;
  float* x = logits + blockIdx.x * row_stride;
  const float* slot = saved + static_cast<int64_t>(k) * vocab;
  const int32_t end = min(vocab, static_cast<int32_t>(blockIdx.y + 1) * kMaskTokensPerBlock);
  for (int32_t t = blockIdx.y * kMaskTokensPerBlock + threadIdx.x; t < end; t += blockDim.x) x[t] = slot[t];
}

// (logit, id) ordered as the top-N list is: higher logit first, lower id first among equals.
__device__ inline bool ranks_before(float xa, int32_t a, float xb, int32_t b) { return xa > xb || (xa == xb && a < b); }

// One block per row: max, the fp64 sum of sampling_exp(x - max) (a fixed reduction order, so the
// result is deterministic), the chosen token's logprob, then the top-N by N rounds of a block
// argmax over the tokens ranked after the previous pick.
__global__ void logprobs_kernel(const float* logits, int64_t row_stride, int32_t vocab, const SamplerRow* rows,
                                SampleOutput* out, TokenLogprob* top) {
  __shared__ float s_max[kLogprobThreads];
  __shared__ double s_sum[kLogprobThreads];
  __shared__ int32_t s_id[kLogprobThreads];
  const int32_t row = blockIdx.x;
  const int tid = threadIdx.x;
  const SamplerRow r = rows[row];
  if (out[row].status != kSampleOk || (!r.want_logprob && r.top_logprobs <= 0)) return;
  const float* x = logits + row * row_stride;

  float m = -FLT_MAX;
  for (int32_t i = tid; i < vocab; i += blockDim.x) m = fmaxf(m, x[i]);
  s_max[tid] = m;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (tid < stride) s_max[tid] = fmaxf(s_max[tid], s_max[tid + stride]);
    __syncthreads();
  }
  m = s_max[0];
  double sum = 0.0;
  for (int32_t i = tid; i < vocab; i += blockDim.x) sum += static_cast<double>(sampling_exp(__fsub_rn(x[i], m)));
  s_sum[tid] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (tid < stride) s_sum[tid] = s_sum[tid] + s_sum[tid + stride];
    __syncthreads();
  }
  const double log_sum = log(s_sum[0]);
  const auto logprob = [&](float v) { return static_cast<float>(static_cast<double>(__fsub_rn(v, m)) - log_sum); };
  if (r.want_logprob && tid == 0) out[row].logprob = logprob(x[out[row].token]);

  // A vocabulary smaller than N has only `vocab` entries; the rest read as TokenLogprob{} (the CPU's).
  const int32_t asked = min(r.top_logprobs, kMaxTopLogprobs);
  const int32_t n = min(asked, vocab);
  if (tid == 0) {
    for (int32_t k = n; k < asked; ++k) top[row * kMaxTopLogprobs + k] = TokenLogprob{};
  }
  float prev_x = FLT_MAX;
  int32_t prev_id = -1;
  for (int32_t k = 0; k < n; ++k) {
    float best_x = 0.0f;
    int32_t best = -1;
    for (int32_t i = tid; i < vocab; i += blockDim.x) {
      const float v = x[i];
      const bool after_prev = k == 0 || ranks_before(prev_x, prev_id, v, i);
      if (after_prev && (best < 0 || ranks_before(v, i, best_x, best))) {
        best_x = v;
        best = i;
      }
    }
    s_max[tid] = best_x;
    s_id[tid] = best;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
      if (tid < stride) {
        const int32_t other = s_id[tid + stride];
        if (other >= 0 && (s_id[tid] < 0 || ranks_before(s_max[tid + stride], other, s_max[tid], s_id[tid]))) {
          s_max[tid] = s_max[tid + stride];
          s_id[tid] = other;
        }
      }
      __syncthreads();
    }
    prev_x = s_max[0];
    prev_id = s_id[0];
    if (tid == 0) top[row * kMaxTopLogprobs + k] = TokenLogprob{prev_id, logprob(prev_x)};
    __syncthreads();
  }
}

}  // namespace

void launch_apply_logit_edits(float* logits, int64_t row_stride, int32_t num_rows, const LogitEdit* edits,
                              const int32_t* offsets, float* saved, cudaStream_t stream) {
  if (num_rows == 0) return;
  apply_edits_kernel<<<num_rows, kEditThreads, 0, stream>>>(logits, row_stride, edits, offsets, saved);
  check(cudaGetLastError(), "launching apply_edits_kernel");
}

void launch_restore_logit_edits(float* logits, int64_t row_stride, int32_t num_rows, const LogitEdit* edits,
                                const int32_t* offsets, const float* saved, cudaStream_t stream) {
  if (num_rows == 0) return;
  restore_edits_kernel<<<num_rows, kEditThreads, 0, stream>>>(logits, row_stride, edits, offsets, saved);
  check(cudaGetLastError(), "launching restore_edits_kernel");
}

void launch_apply_token_masks(float* logits, int64_t row_stride, int32_t num_rows, int32_t vocab_size,
                              const TokenMaskWord* masks, const int32_t* mask_rows, float* saved, cudaStream_t stream) {
  if (num_rows == 0) return;
  const dim3 grid(num_rows, (vocab_size + kMaskTokensPerBlock - 1) / kMaskTokensPerBlock);
  apply_masks_kernel<<<grid, kMaskThreads, 0, stream>>>(logits, row_stride, vocab_size, token_mask_words(vocab_size),
                                                        masks, mask_rows, saved);
  check(cudaGetLastError(), "launching apply_masks_kernel");
}

void launch_restore_token_masks(float* logits, int64_t row_stride, int32_t num_rows, int32_t vocab_size,
                                const int32_t* mask_rows, const float* saved, cudaStream_t stream) {
  if (num_rows == 0) return;
  const dim3 grid(num_rows, (vocab_size + kMaskTokensPerBlock - 1) / kMaskTokensPerBlock);
  restore_masks_kernel<<<grid, kMaskThreads, 0, stream>>>(logits, row_stride, vocab_size, mask_rows, saved);
  check(cudaGetLastError(), "launching restore_masks_kernel");
}

void launch_logprobs(const float* logits, int64_t row_stride, int32_t num_rows, int32_t vocab_size,
                     const SamplerRow* rows, SampleOutput* out, TokenLogprob* top, cudaStream_t stream) {
  if (num_rows == 0) return;
  logprobs_kernel<<<num_rows, kLogprobThreads, 0, stream>>>(logits, row_stride, vocab_size, rows, out, top);
  check(cudaGetLastError(), "launching logprobs_kernel");
}

}  // namespace kiln
