// Bytes-read accounting for DeepSeekMoE: marks which experts a step chose in this layer. The
// runtime zeroes the usage bytes before a step and counts them after it (--output-format json
// reports the weight bytes a decode step actually reads).
#pragma once

#include "templates/common.cuh"

namespace kiln {

template <int kExperts, int kTopK>
__global__ void moe_record_kernel(const int* ids, unsigned char* usage, int pairs) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < pairs) {
    const int id = ids[i];
    if (id >= 0 && id < kExperts) usage[id] = 1;
  }
}

template <int kExperts, int kTopK>
void moe_record(const int* ids, unsigned char* usage, int tokens, cudaStream_t stream) {
  const int pairs = tokens * kTopK;
  if (pairs <= 0) return;
  auto kernel = moe_record_kernel<kExperts, kTopK>;
  KILN_LAUNCH(kernel, (pairs + 255) / 256, 256, 0, stream, ids, usage, pairs);
}

}  // namespace kiln
