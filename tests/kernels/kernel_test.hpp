// What every op test shares: the Catch2 checks, device buffers and random data
// (tests/support), and the generated models whose shape constants the tests instantiate the
// kernels with, the very constants the generated kernels.cu instantiates (one short name per
// model: `smollm2::kRmsnorm576`). Shapes no model has are written out where they are used, each
// with the reason it is there.
#pragma once

#include <cmath>
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

}  // namespace kiln::kernel_test
