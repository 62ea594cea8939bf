// Host API of the CUDA sampler (kernel in sampler.cuh). Same results as sample_cpu: identical
// tokens and status, logprobs equal to float rounding.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/serving/sampling_math.hpp"

namespace kiln {

// Enqueues sampling of num_rows rows of device logits (row r at logits + r * row_stride, vocab_size
// values) with device-resident rows[num_rows]; writes out[num_rows] on the device.
void launch_sampler(const float* logits, int64_t row_stride, int32_t num_rows, int32_t vocab_size,
                    const SamplerRow* rows, SampleOutput* out, cudaStream_t stream);

// Owns the staging buffers (pinned on the host, and on the device) for up to max_rows rows.
class CudaSampler {
 public:
  explicit CudaSampler(int32_t max_rows);
  ~CudaSampler();
  CudaSampler(const CudaSampler&) = delete;
  CudaSampler& operator=(const CudaSampler&) = delete;

  // Copies rows in, samples, copies the outputs back; synchronizes with `stream`.
  std::vector<SampleOutput> sample(const float* logits, int64_t row_stride, int32_t vocab_size,
                                   std::span<const SamplerRow> rows, cudaStream_t stream);

 private:
  int32_t max_rows_;
  SamplerRow* host_rows_ = nullptr;
  SampleOutput* host_out_ = nullptr;
  SamplerRow* device_rows_ = nullptr;
  SampleOutput* device_out_ = nullptr;
};

}  // namespace kiln
