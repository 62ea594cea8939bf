// Brings the first bytes of a weight into L2 ahead of the projection that reads it, while the GPU
// waits on something else (a tensor-parallel decode step's all-reduce: runtime/cuda/collective_ops.hpp).
// Each thread asks for one chunk and returns: on Hopper one bulk prefetch (cp.async.bulk.prefetch.L2,
// fetched by the memory system after the kernel has ended), before it a prefetch hint per 128-byte
// line. A hint only: nothing waits for it, and what is not in L2 in time is read from DRAM as before.
#pragma once

#include "templates/common.cuh"

namespace kiln {

namespace detail {

constexpr int kWarmChunkBytes = 32 << 10;
constexpr int kWarmThreads = 128;

// A template, like every kernel here: one definition however many rank builds include it.
template <int kChunkBytes>
__global__ void __launch_bounds__(kWarmThreads) l2_warm_kernel(const char* __restrict__ weight, long long bytes) {
  const long long begin = (static_cast<long long>(blockIdx.x) * kWarmThreads + threadIdx.x) * kChunkBytes;
  if (begin < bytes) {
    const long long n = bytes - begin < kChunkBytes ? bytes - begin : kChunkBytes;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned size = static_cast<unsigned>(n) & ~15u;  // whole 16-byte units
    if (size > 0) {
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(weight + begin), "r"(size) : "memory");
    }
#else
    for (long long at = 0; at < n; at += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(weight + begin + at));
#endif
  }
  // Weights only above; the wait keeps the stream's order for what comes after (common.cuh).
  pdl_release_and_wait();
}

}  // namespace detail

// Warms weight[0, bytes) in L2 (weight 16-byte aligned, as the loader places every kiln weight).
inline void l2_warm(const void* weight, long long bytes, cudaStream_t stream) {
  if (bytes <= 0) return;
  const long long chunks = (bytes + detail::kWarmChunkBytes - 1) / detail::kWarmChunkBytes;
  const int blocks = static_cast<int>((chunks + detail::kWarmThreads - 1) / detail::kWarmThreads);
  constexpr auto kernel = detail::l2_warm_kernel<detail::kWarmChunkBytes>;
  KILN_LAUNCH(kernel, blocks, detail::kWarmThreads, 0, stream, static_cast<const char*>(weight), bytes);
}

}  // namespace kiln
