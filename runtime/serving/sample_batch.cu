// CUDA side of sample_batch.hpp: the logit edits and the token masks applied in place before the
// sampler and undone after it, and the raw logprobs (chosen token and top-N) of the restored rows.
// Same float operations as sample_batch_cpu: edits and masks bit for bit, logprobs to the rounding
// of an fp64 sum.
#include "runtime/serving/sample_batch_cuda.hpp"

#include <algorithm>
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

// The raw logprobs, over slices of each row (kLogprobSlice tokens, logprob_parts of them) so that
// a batch of one spreads over the GPU: one 256-thread block per row took ~0.2 ms of a 128,256-token
// row, a fifth of Llama-3.2-1B's decode step (with --logprobs 1.218 ms a step at batch 1, 1.029
// split, against 1.005 without; H100, 2026-12-06, bench/RESULTS.md). Three launches, each block
// (row, slice) but the last's (row):
//   slices  the slice's max, and its top-N by N rounds of a block argmax over the slice's tokens
//           ranked after the previous pick (candidates: the row's top-N is among the slices');
//   sums    the row's max (the slices' maxima: an exact max, in any order), then the slice's fp64
//           sum of sampling_exp(x - max) in a fixed order;
//   finish  the slices' sums added in slice order (so the result is deterministic, whatever the
//           batch), the chosen token's logprob, and the top-N merged from the candidates.
// Rows that did not ask (want_logprob, top_logprobs) or did not sample fine (out[r].status) return
// at once in every launch.
__device__ inline bool wants_logprobs(const SamplerRow& r, const SampleOutput& o) {
  return o.status == kSampleOk && (r.want_logprob || r.top_logprobs > 0);
}

// Every thread's x combined by `op` over the block, in a fixed tree (the halves folded at strides
// blockDim.x / 2, / 4, ...), in every thread (s: blockDim.x values of shared memory, free again on
// return).
template <class T, class Op>
__device__ inline T block_reduce(T x, T* s, Op op) {
  const int tid = threadIdx.x;
  s[tid] = x;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (tid < stride) s[tid] = op(s[tid], s[tid + stride]);
    __syncthreads();
  }
  const T r = s[0];
  __syncthreads();
  return r;
}

// A candidate of block_best: a logit and its token (id < 0: none). (Plain, so that it may live in
// shared memory: TokenLogprob's members have initializers.)
struct Pick {
  float x;
  int32_t id;
};

// The block's best (logit, id) over its values (id < 0: none), ranked as ranks_before ranks them, in
// every thread (s: blockDim.x entries of shared memory).
__device__ inline TokenLogprob block_best(float x, int32_t id, Pick* s) {
  const Pick best = block_reduce(Pick{x, id}, s, [](const Pick& a, const Pick& b) {
    return b.id >= 0 && (a.id < 0 || ranks_before(b.x, b.id, a.x, a.id)) ? b : a;
  });
  return TokenLogprob{best.id, best.x};
}

__device__ inline float block_max(float x, float* s_x) {
  return block_reduce(x, s_x, [](float a, float b) { return fmaxf(a, b); });
}

// Writes each slice's maximum (part_max [row][part]) and its top-N candidates (candidates
// [row][part][kMaxTopLogprobs]: token, raw logit; token -1: none).
__global__ void logprob_slices_kernel(const float* logits, int64_t row_stride, int32_t vocab, int32_t slice,
                                      const SamplerRow* rows, const SampleOutput* out, LogprobScratch scratch) {
  __shared__ float s_x[kLogprobThreads];
  __shared__ Pick s_best[kLogprobThreads];
  const int32_t row = blockIdx.x, part = blockIdx.y, parts = gridDim.y, tid = threadIdx.x;
  const SamplerRow r = rows[row];
  if (!wants_logprobs(r, out[row])) return;
  const float* x = logits + row * row_stride;
  const int32_t begin = part * slice, end = min(vocab, begin + slice);
  float m = -FLT_MAX;
  for (int32_t i = begin + tid; i < end; i += blockDim.x) m = fmaxf(m, x[i]);
  m = block_max(m, s_x);
  if (tid == 0) scratch.part_max[row * parts + part] = m;
  TokenLogprob* candidates = scratch.candidates + (static_cast<int64_t>(row) * parts + part) * kMaxTopLogprobs;
  const int32_t n = min(r.top_logprobs, kMaxTopLogprobs);
  TokenLogprob prev{-1, FLT_MAX};
  for (int32_t k = 0; k < n; ++k) {
    float best_x = 0.0f;
    int32_t best = -1;
    for (int32_t i = begin + tid; i < end; i += blockDim.x) {
      const float v = x[i];
      if ((k == 0 || ranks_before(prev.logprob, prev.token, v, i)) && (best < 0 || ranks_before(v, i, best_x, best))) {
        best_x = v;
        best = i;
      }
    }
    prev = block_best(best_x, best, s_best);
    if (prev.token < 0) {  // the slice has run out: its other candidates are none
      if (tid == 0) {
        for (int32_t rest = k; rest < n; ++rest) candidates[rest] = TokenLogprob{};
      }
      break;
    }
    if (tid == 0) candidates[k] = prev;
  }
}

// The row's maximum, from its slices' (logprob_slices_kernel), in every thread.
__device__ inline float row_max(const LogprobScratch& scratch, int32_t row, int32_t parts, float* s_x) {
  float m = -FLT_MAX;
  for (int32_t p = threadIdx.x; p < parts; p += blockDim.x) m = fmaxf(m, scratch.part_max[row * parts + p]);
  return block_max(m, s_x);
}

__global__ void logprob_sums_kernel(const float* logits, int64_t row_stride, int32_t vocab, int32_t slice,
                                    const SamplerRow* rows, const SampleOutput* out, LogprobScratch scratch) {
  __shared__ float s_x[kLogprobThreads];
  __shared__ double s_sum[kLogprobThreads];
  const int32_t row = blockIdx.x, part = blockIdx.y, parts = gridDim.y, tid = threadIdx.x;
  if (!wants_logprobs(rows[row], out[row])) return;
  const float* x = logits + row * row_stride;
  const float m = row_max(scratch, row, parts, s_x);
  const int32_t begin = part * slice, end = min(vocab, begin + slice);
  double sum = 0.0;
  for (int32_t i = begin + tid; i < end; i += blockDim.x) sum += static_cast<double>(sampling_exp(__fsub_rn(x[i], m)));
  sum = block_reduce(sum, s_sum, [](double a, double b) { return a + b; });
  if (tid == 0) scratch.part_sum[row * parts + part] = sum;
}

__global__ void logprob_finish_kernel(const float* logits, int64_t row_stride, int32_t vocab, int32_t parts,
                                      const SamplerRow* rows, SampleOutput* out, TokenLogprob* top,
                                      LogprobScratch scratch) {
  __shared__ float s_x[kLogprobThreads];
  __shared__ Pick s_best[kLogprobThreads];
  __shared__ double s_log_sum;
  const int32_t row = blockIdx.x, tid = threadIdx.x;
  const SamplerRow r = rows[row];
  if (!wants_logprobs(r, out[row])) return;
  const float* x = logits + row * row_stride;
  const float m = row_max(scratch, row, parts, s_x);
  if (tid == 0) {
    double total = 0.0;
    for (int32_t p = 0; p < parts; ++p) total += scratch.part_sum[row * parts + p];
    s_log_sum = log(total);
  }
  __syncthreads();
  const double log_sum = s_log_sum;
  const auto logprob = [&](float v) { return static_cast<float>(static_cast<double>(__fsub_rn(v, m)) - log_sum); };
  if (r.want_logprob && tid == 0) out[row].logprob = logprob(x[out[row].token]);

  // A vocabulary smaller than N has only `vocab` entries; the rest read as TokenLogprob{} (the CPU's).
  const int32_t asked = min(r.top_logprobs, kMaxTopLogprobs);
  const int32_t n = min(asked, vocab);
  if (tid == 0) {
    for (int32_t k = n; k < asked; ++k) top[row * kMaxTopLogprobs + k] = TokenLogprob{};
  }
  const TokenLogprob* candidates = scratch.candidates + static_cast<int64_t>(row) * parts * kMaxTopLogprobs;
  const int32_t count = parts * kMaxTopLogprobs;
  TokenLogprob prev{-1, FLT_MAX};
  for (int32_t k = 0; k < n; ++k) {
    float best_x = 0.0f;
    int32_t best = -1;
    for (int32_t c = tid; c < count; c += blockDim.x) {
      if (c % kMaxTopLogprobs >= n) continue;  // a slice wrote n candidates at most
      const TokenLogprob e = candidates[c];
      if (e.token < 0) continue;
      if ((k == 0 || ranks_before(prev.logprob, prev.token, e.logprob, e.token)) &&
          (best < 0 || ranks_before(e.logprob, e.token, best_x, best))) {
        best_x = e.logprob;
        best = e.token;
      }
    }
    prev = block_best(best_x, best, s_best);
    if (tid == 0) top[row * kMaxTopLogprobs + k] = TokenLogprob{prev.token, logprob(prev.logprob)};
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

int32_t logprob_parts(int32_t vocab_size) {
  return std::clamp((vocab_size + kLogprobSlice - 1) / kLogprobSlice, 1, kLogprobMaxParts);
}

void launch_logprobs(const float* logits, int64_t row_stride, int32_t num_rows, int32_t vocab_size,
                     const SamplerRow* rows, SampleOutput* out, TokenLogprob* top, LogprobScratch scratch,
                     cudaStream_t stream) {
  if (num_rows == 0) return;
  const int32_t parts = logprob_parts(vocab_size), slice = (vocab_size + parts - 1) / parts;
  const dim3 grid(num_rows, parts);
  logprob_slices_kernel<<<grid, kLogprobThreads, 0, stream>>>(logits, row_stride, vocab_size, slice, rows, out, scratch);
  check(cudaGetLastError(), "launching logprob_slices_kernel");
  logprob_sums_kernel<<<grid, kLogprobThreads, 0, stream>>>(logits, row_stride, vocab_size, slice, rows, out, scratch);
  check(cudaGetLastError(), "launching logprob_sums_kernel");
  logprob_finish_kernel<<<num_rows, kLogprobThreads, 0, stream>>>(logits, row_stride, vocab_size, parts, rows, out, top,
                                                                  scratch);
  check(cudaGetLastError(), "launching logprob_finish_kernel");
}

}  // namespace kiln
