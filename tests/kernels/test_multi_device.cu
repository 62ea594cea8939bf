// Kernels that need more than 48 KiB of dynamic shared memory raise their limit per device
// (allow_dynamic_smem_once, templates/common.cuh): a tensor-parallel process launches them on every
// GPU. The routed experts' fused gate|up GEMM (197 KiB on Hopper's wgmma tiles) runs on each GPU in
// turn and must give device 0's bits; a launch without the raised limit fails and leaves the
// poisoned output. Needs 2 GPUs; with one the case says so and passes.
#include "templates/moe_gate_up.cuh"
#include "tests/kernels/kernel_test.hpp"
#include "tests/kernels/moe_experts.hpp"

namespace kiln::kernel_test {

TEST_CASE("kernels above 48 KiB of shared memory launch on every GPU of the process", "[multi_gpu]") {
  int devices = 0;
  KILN_CUDA_OK(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    WARN("one GPU visible: the launches on a second GPU are not run");
    return;
  }
  constexpr shape::moe_gate_up_act S{.experts = tiny_ds::kMoeExpertsGateUp.experts,
                                     .top_k = tiny_ds::kMoeExpertsGateUp.top_k,
                                     .hidden = tiny_ds::kMoeExpertsGateUp.hidden,
                                     .inter = tiny_ds::kMoeExpertsGateUp.inter,
                                     .sms = tiny_ds::kMoeExpertsGateUp.sms};
  constexpr int kTokens = 300;
  constexpr int kPairs = kTokens * S.top_k;
  std::mt19937 rng(31000);
  const auto ids = make_ids(kTokens, S.experts, S.top_k, rng);
  const auto h = random_bf16(static_cast<size_t>(kTokens) * S.hidden, rng);
  const auto weight = random_bf16(static_cast<size_t>(S.experts) * 2 * S.inter * S.hidden, rng, 0.1f);
  struct BackToDeviceZero {  // the other test cases run on device 0, whatever failed here
    ~BackToDeviceZero() { cudaSetDevice(0); }
  } back_to_device_zero;
  std::vector<uint16_t> first;
  for (int d = 0; d < devices; ++d) {
    KILN_CUDA_OK(cudaSetDevice(d));
    {
      DeviceBuffer<uint16_t> d_h(h), d_weight(weight), d_gate_up(static_cast<size_t>(kPairs) * 2 * S.inter),
          d_act(static_cast<size_t>(kPairs) * S.inter);
      DeviceBuffer<int> d_ids(ids), d_scratch(static_cast<size_t>(kTokens) * moe_scratch_ints_per_token<S>());
      d_act.poison();
      moe_gate_up_act_prefill<S>(as_bf16(d_h), as_bf16(d_weight), d_ids.get(), as_bf16_mut(d_gate_up),
                                 as_bf16_mut(d_act), d_scratch.get(), kTokens, nullptr);
      const std::string what = "moe_gate_up_act_prefill on device " + std::to_string(d);
      check_launch(what);
      const auto act = d_act.download();
      if (d == 0) {
        first = act;
      } else {
        check_same_bits(what, "device 0's", first, act);
      }
    }
  }
}

}  // namespace kiln::kernel_test
