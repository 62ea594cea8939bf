// Small helpers shared by the DeepSeek op tests (on top of tests/kernels/gpu_harness.hpp).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/kernels/gpu_harness.hpp"

namespace kiln::kernel_test {

// Device copies of a weight tensor, enough that rotating over them exceeds L2 (3× its size): a
// timed call then reads its weights from DRAM, as a decode step does.
class RotatingWeights {
 public:
  explicit RotatingWeights(const DeviceBuffer<uint16_t>& source)
      : elems_(source.size()), copies_(copies_beyond_l2(source.size() * 2)), buffer_(source.size() * copies_) {
    for (int i = 0; i < copies_; ++i) {
      KILN_CUDA_OK(cudaMemcpy(buffer_.get() + elems_ * i, source.get(), elems_ * 2, cudaMemcpyDeviceToDevice));
    }
  }
  const __nv_bfloat16* at(int i) const {
    return reinterpret_cast<const __nv_bfloat16*>(buffer_.get() + elems_ * static_cast<size_t>(i % copies_));
  }

 private:
  size_t elems_;
  int copies_;
  DeviceBuffer<uint16_t> buffer_;
};

inline void sync_and_check(const std::string& what) {
  KILN_CUDA_OK(cudaDeviceSynchronize());
  const cudaError_t status = cudaGetLastError();
  expect(status == cudaSuccess, what + ": " + cudaGetErrorString(status));
}

template <typename T>
std::string join(const std::vector<T>& values) {
  std::string s;
  for (const T& v : values) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

}  // namespace kiln::kernel_test
