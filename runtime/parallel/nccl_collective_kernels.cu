// The one kernel of NcclCollective: out += Σ partial after an in-place ncclAllReduce (all_reduce with
// add). Elementwise, so it rounds as the CPU group's out[i] += sum[i].
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace kiln {

namespace {

__global__ void add_into_kernel(float* __restrict__ out, const float* __restrict__ in, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) out[i] += in[i];
}

}  // namespace

cudaError_t nccl_collective_add_into(float* out, const float* in, int64_t count, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((count + kThreads - 1) / kThreads, 4096);
  // This launch's own error, not the thread's last one: a kernel of the step that failed to launch
  // before is the step's end check's to report, once every collective of the step is issued (a rank
  // that stopped here would leave the other ranks' collectives waiting for its part).
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  return cudaLaunchKernelEx(&config, add_into_kernel, out, in, count);
}

}  // namespace kiln
