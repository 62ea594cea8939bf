#include "runtime/serving/sampler.hpp"

#include <cuda_runtime.h>

#include <algorithm>

#include "runtime/core/error.hpp"
#include "runtime/serving/sampler.cuh"

namespace kiln {
namespace {

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("CUDA sampler: ", what, ": ", cudaGetErrorString(status));
}

}  // namespace

void launch_sampler(const float* logits, int64_t row_stride, int32_t num_rows, int32_t vocab_size,
                    const SamplerRow* rows, SampleOutput* out, cudaStream_t stream) {
  if (vocab_size <= 0 || vocab_size > kMaxSamplerVocab) {
    fail("CUDA sampler: vocabulary size ", vocab_size, " is outside [1, ", kMaxSamplerVocab, "]");
  }
  if (row_stride < vocab_size) fail("CUDA sampler: row stride ", row_stride, " < vocabulary size ", vocab_size);
  if (num_rows < 0) fail("CUDA sampler: num_rows = ", num_rows, ": expected >= 0");
  if (num_rows == 0) return;
  sampler_kernels::sample_rows_kernel<<<num_rows, sampler_kernels::kThreads, 0, stream>>>(
      logits, row_stride, vocab_size, rows, out);
  check_cuda(cudaGetLastError(), "launching sample_rows_kernel");
}

CudaSampler::CudaSampler(int32_t max_rows) : max_rows_(max_rows) {
  if (max_rows <= 0) fail("CUDA sampler: max_rows = ", max_rows, ": expected > 0");
  check_cuda(cudaMallocHost(&host_rows_, sizeof(SamplerRow) * max_rows), "cudaMallocHost(rows)");
  check_cuda(cudaMallocHost(&host_out_, sizeof(SampleOutput) * max_rows), "cudaMallocHost(outputs)");
  check_cuda(cudaMalloc(&device_rows_, sizeof(SamplerRow) * max_rows), "cudaMalloc(rows)");
  check_cuda(cudaMalloc(&device_out_, sizeof(SampleOutput) * max_rows), "cudaMalloc(outputs)");
}

CudaSampler::~CudaSampler() {
  cudaFree(device_out_);
  cudaFree(device_rows_);
  cudaFreeHost(host_out_);
  cudaFreeHost(host_rows_);
}

std::vector<SampleOutput> CudaSampler::sample(const float* logits, int64_t row_stride, int32_t vocab_size,
                                              std::span<const SamplerRow> rows, cudaStream_t stream) {
  const auto n = static_cast<int32_t>(rows.size());
  if (n > max_rows_) fail("CUDA sampler: ", n, " rows exceed the ", max_rows_, " it was created for");
  if (n == 0) return {};
  std::copy(rows.begin(), rows.end(), host_rows_);
  check_cuda(cudaMemcpyAsync(device_rows_, host_rows_, sizeof(SamplerRow) * n, cudaMemcpyHostToDevice, stream),
             "copying sampler rows");
  launch_sampler(logits, row_stride, n, vocab_size, device_rows_, device_out_, stream);
  check_cuda(cudaMemcpyAsync(host_out_, device_out_, sizeof(SampleOutput) * n, cudaMemcpyDeviceToHost, stream),
             "copying sampler outputs");
  check_cuda(cudaStreamSynchronize(stream), "sampling");
  return std::vector<SampleOutput>(host_out_, host_out_ + n);
}

}  // namespace kiln
