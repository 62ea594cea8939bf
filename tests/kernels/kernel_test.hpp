// What every op test shares: the Catch2 checks, device buffers and random data
// (tests/support), and the generated models whose shape constants the tests instantiate the
// kernels with, the very constants the generated kernels.cu instantiates (one short name per
// model: `smollm2::kRmsnorm576`). Shapes no model has are written out where they are used, each
// with the reason it is there.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "generated/deepseek-v2-lite/model.hpp"
#include "generated/llama-3.2-1b/model.hpp"
#include "generated/qwen3-0.6b/model.hpp"
#include "generated/smollm2-135m/model.hpp"
#include "generated/tiny-deepseek-v2-lite/model.hpp"
#include "generated/tiny-deepseek-v2/model.hpp"
#include "generated/tiny-qwen3/model.hpp"
#include "tests/support/gpu_checks.hpp"
#include "tests/support/gpu_harness.hpp"

namespace kiln::kernel_test {

namespace llama1b = models::llama_3_2_1b;
namespace qwen06 = models::qwen3_0_6b;
namespace smollm2 = models::smollm2_135m;
namespace dsv2lite = models::deepseek_v2_lite;
namespace tiny_ds = models::tiny_deepseek_v2;
namespace tiny_ds_lite = models::tiny_deepseek_v2_lite;
namespace tiny_qwen3 = models::tiny_qwen3;

// A prep step's token rows (attention_prep, mla_prep): a position in [0, 4096) per token and
// distinct cache slots drawn from [0, slots_total), the middle token's -1 (padding) when there
// are more than two tokens.
struct PrepSteps {
  std::vector<int> positions, slots;
};
inline PrepSteps random_prep_steps(int tokens, int slots_total, std::mt19937& rng) {
  PrepSteps s{std::vector<int>(tokens), std::vector<int>(slots_total)};
  std::uniform_int_distribution<int> pick(0, 4095);
  for (auto& p : s.positions) p = pick(rng);
  std::iota(s.slots.begin(), s.slots.end(), 0);
  std::shuffle(s.slots.begin(), s.slots.end(), rng);
  s.slots.resize(tokens);
  if (tokens > 2) s.slots[tokens / 2] = -1;  // a padding token
  return s;
}

}  // namespace kiln::kernel_test
