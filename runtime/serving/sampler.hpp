// Host API of the CUDA sampler (kernel in sampler.cuh, how rows are split over blocks in sampler.cu).
// Same results as sample_cpu: identical tokens and status, logprobs equal to float rounding.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/serving/sample_batch.hpp"
#include "runtime/serving/sample_batch_cuda.hpp"
#include "runtime/serving/sampling_math.hpp"

namespace kiln {

// Fewest tokens a block of the multi-block path takes: below this, more blocks per row add
// combining work without shortening the row's passes.
constexpr int32_t kSamplerMinTokensPerBlock = 1024;

// Device scratch that lets small batches spread each row over many blocks: per-block partials and
// per-row histograms and barrier counters. Allocated once for the current device; every launch
// reuses it, so launches through it are capturable in a CUDA graph. Launches sharing a workspace
// must be ordered (one stream, or one graph chain): its counters and histograms are not per launch.
class SamplerWorkspace {
 public:
  // Serves batches of up to max_rows rows (fewer if the device cannot hold 2 blocks per row).
  explicit SamplerWorkspace(int32_t max_rows, int32_t min_tokens_per_block = kSamplerMinTokensPerBlock);
  ~SamplerWorkspace();
  SamplerWorkspace(const SamplerWorkspace&) = delete;
  SamplerWorkspace& operator=(const SamplerWorkspace&) = delete;

  // How a batch is laid out: `blocks_per_row` blocks per row, each taking `tokens_per_block`
  // consecutive token ids; blocks_per_row = 1 is the one-block-per-row kernel.
  struct Split {
    int32_t blocks_per_row;
    int32_t tokens_per_block;
  };
  Split split(int32_t num_rows, int32_t vocab_size) const;

  int32_t max_rows() const { return max_rows_; }
  // Blocks of the multi-block kernel the device holds at once (0: no cooperative launch).
  int32_t resident_blocks() const { return resident_blocks_; }

 private:
  friend void launch_sampler(const float*, int64_t, int32_t, int32_t, const SamplerRow*, SampleOutput*,
                             SamplerWorkspace&, cudaStream_t);

  int32_t max_rows_ = 0;
  int32_t resident_blocks_ = 0;
  int32_t min_tokens_per_block_;
  void* device_memory_ = nullptr;
};

// Enqueues sampling of num_rows rows of device logits (row r at logits + r * row_stride, vocab_size
// values) with device-resident rows[num_rows]; writes out[num_rows] on the device. With a
// workspace, small batches spread each row over many blocks; without one, one block per row.
// No host synchronization: capturable.
void launch_sampler(const float* logits, int64_t row_stride, int32_t num_rows, int32_t vocab_size,
                    const SamplerRow* rows, SampleOutput* out, SamplerWorkspace& workspace, cudaStream_t stream);
void launch_sampler(const float* logits, int64_t row_stride, int32_t num_rows, int32_t vocab_size,
                    const SamplerRow* rows, SampleOutput* out, cudaStream_t stream);

// Owns the staging buffers (pinned on the host, and on the device) and the workspace for up to
// max_rows rows.
class CudaSampler {
 public:
  explicit CudaSampler(int32_t max_rows);
  ~CudaSampler();
  CudaSampler(const CudaSampler&) = delete;
  CudaSampler& operator=(const CudaSampler&) = delete;

  // Copies rows in, samples, copies the outputs back; synchronizes with `stream`.
  std::vector<SampleOutput> sample(const float* logits, int64_t row_stride, int32_t vocab_size,
                                   std::span<const SamplerRow> rows, cudaStream_t stream);
  // With the batch's logit edits, masks and logprobs (sample_batch.hpp): the edits and masks are
  // applied to `logits` in place and undone before it returns. Synchronizes with `stream`.
  SampleResult sample(float* logits, int64_t row_stride, int32_t vocab_size, const SampleBatch& batch,
                      cudaStream_t stream);

  // Raw logprobs of given tokens (one per row) with each row's top_n, as logprobs_cpu.
  SampleResult logprobs(const float* logits, int64_t row_stride, int32_t vocab_size, std::span<const int32_t> tokens,
                        int32_t top_n, cudaStream_t stream);

  // For enqueueing (or capturing) launch_sampler with device-resident rows and outputs.
  SamplerWorkspace& workspace() { return workspace_; }

 private:
  int32_t max_rows_;
  SamplerWorkspace workspace_;
  SamplerRow* host_rows_ = nullptr;
  SampleOutput* host_out_ = nullptr;
  SamplerRow* device_rows_ = nullptr;
  SampleOutput* device_out_ = nullptr;
  // sample(SampleBatch): the rows as given (for the logprobs), top-N outputs, and the edits
  // (grown on demand) with their offsets and the logits they replace.
  SamplerRow* device_raw_rows_ = nullptr;
  TokenLogprob* device_top_ = nullptr;
  LogprobScratch logprob_scratch_;  // launch_logprobs' slices, for max_rows rows
  int32_t* device_edit_offsets_ = nullptr;
  LogitEdit* device_edits_ = nullptr;
  float* device_saved_ = nullptr;
  size_t edit_capacity_ = 0;
  // Structured output's masks (grown on demand), which row uses which, and the masked rows' logits.
  TokenMaskWord* device_masks_ = nullptr;
  int32_t* device_mask_rows_ = nullptr;
  float* device_mask_saved_ = nullptr;
  size_t mask_word_capacity_ = 0;
  size_t mask_saved_capacity_ = 0;
};

}  // namespace kiln
