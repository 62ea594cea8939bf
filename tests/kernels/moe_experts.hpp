// Inputs of the routed-expert tests (test_moe_gate_up.cu, test_moe_down.cu): routing ids that share
// experts even in small batches, and expert tensors made of a few distinct matrices repeated (the
// CPU reference then multiplies by the few, not by every expert).
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "tests/support/gpu_harness.hpp"

namespace kiln::kernel_test {

// Each token's top_k distinct experts, drawn mostly from a small popular set.
inline std::vector<int> make_ids(int tokens, int experts, int top_k, std::mt19937& rng) {
  std::vector<int> order(experts);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const int popular = std::min(experts, 2 * top_k);
  std::uniform_real_distribution<float> coin(0.0f, 1.0f);
  std::vector<int> ids;
  for (int t = 0; t < tokens; ++t) {
    std::vector<int> chosen;
    while (static_cast<int>(chosen.size()) < top_k) {
      const int e = coin(rng) < 0.6f ? order[rng() % popular] : static_cast<int>(rng() % experts);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    ids.insert(ids.end(), chosen.begin(), chosen.end());
  }
  return ids;
}

// Expert tensor [experts][rows][cols] on the device made of `distinct` random matrices: expert e is
// matrix e % distinct.
struct ExpertTensor {
  static constexpr int kDistinct = 8;
  int distinct;
  std::vector<float> distinct_f;  // [distinct][rows][cols]
  DeviceBuffer<uint16_t> device;
  ExpertTensor(int experts, size_t matrix, std::mt19937& rng, float scale)
      : distinct(std::min(experts, kDistinct)), device(matrix * experts) {
    const auto values = random_bf16(matrix * distinct, rng, scale);
    distinct_f = bf16_to_f32(values);
    for (int e = 0; e < experts; ++e) {
      KILN_CUDA_OK(cudaMemcpy(device.get() + matrix * e, values.data() + matrix * (e % distinct), matrix * 2,
                              cudaMemcpyHostToDevice));
    }
  }
  // The ids as the reference sees them: indices into the distinct matrices (-1, another rank's
  // expert, stays -1).
  std::vector<int32_t> reference_ids(const std::vector<int>& ids) const {
    std::vector<int32_t> mapped(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) mapped[i] = ids[i] < 0 ? -1 : ids[i] % distinct;
    return mapped;
  }
};

}  // namespace kiln::kernel_test
