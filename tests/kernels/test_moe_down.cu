// moe_down (templates/moe_down.cuh) against ref::moe_down: the chosen experts' down projections
// into per-pair rows, then weighted and added into the residual (the added part compared);
// streaming at decode and as a grouped GEMM above; moe_down_prefill (the GEMM) at every T.
// It reads the buckets moe_gate_up leaves in scratch, so moe_gate_up runs first.
// With expert parallelism, pairs routed to another rank's experts (id -1) add nothing.
#include "runtime/ref/moe.hpp"
#include "templates/moe_down.cuh"
#include "templates/moe_gate_up.cuh"
#include "tests/kernels/kernel_test.hpp"
#include "tests/kernels/moe_experts.hpp"

namespace kiln::kernel_test {
namespace {

// other_ranks: ids of experts past the first half become -1, as moe_route gives them on a rank
// holding the first half.
// with_shared: each run once more with the shared experts' output given, which must come out as the
// run without it plus that output, in one more fp32 addition (bit for bit).
template <shape::moe_down S>
void check_down(const std::vector<int>& token_counts, bool other_ranks = false, bool with_shared = false) {
  constexpr shape::moe_gate_up kBuckets{.experts = S.experts, .top_k = S.top_k, .hidden = S.hidden, .inter = S.inter, .sms = S.sms};
  std::mt19937 rng(28000 + S.experts * S.hidden + S.inter);
  ExpertTensor down(S.experts, static_cast<size_t>(S.hidden) * S.inter, rng, 1.0f / std::sqrt(float(S.inter)));
  DeviceBuffer<uint16_t> gate_up(static_cast<size_t>(S.experts) * 2 * S.inter * S.hidden);
  gate_up.poison();  // its outputs are not looked at: moe_gate_up runs for the buckets
  for (int tokens : token_counts) {
    const int pairs = tokens * S.top_k;
    auto ids = make_ids(tokens, S.experts, S.top_k, rng);
    if (other_ranks) {
      for (int& e : ids) e = e < S.experts / 2 ? e : -1;
    }
    const auto act = random_bf16(static_cast<size_t>(pairs) * S.inter, rng);
    std::uniform_real_distribution<float> weight_dist(0.05f, 1.0f);
    std::vector<float> weights(pairs);
    for (auto& w : weights) w = weight_dist(rng);
    const auto x0 = random_f32(static_cast<size_t>(tokens) * S.hidden, rng);
    DeviceBuffer<uint16_t> d_h(static_cast<size_t>(tokens) * S.hidden), d_gate_up_out(static_cast<size_t>(pairs) * 2 * S.inter);
    d_h.poison();  // moe_gate_up reads it (compute-sanitizer's initcheck: it was never written)
    DeviceBuffer<uint16_t> d_act(act);
    DeviceBuffer<int> d_ids(ids), d_scratch(static_cast<size_t>(tokens) * moe_scratch_ints_per_token<kBuckets>());
    DeviceBuffer<float> d_weights(weights);
    DeviceBuffer<uint16_t> d_pairs(static_cast<size_t>(tokens) * moe_down_pair_values_per_token<S>());
    std::vector<float> ref = x0;
    const auto mapped = down.reference_ids(ids);
    ref::moe_down(S, bf16_to_f32(act).data(), down.distinct_f.data(), mapped.data(), weights.data(), nullptr, ref.data(),
                  tokens);
    const std::vector<float> shared = with_shared ? random_f32(x0.size(), rng) : std::vector<float>{};
    DeviceBuffer<float> d_shared(shared);
    std::vector<float> ref_added(x0.size());
    for (size_t i = 0; i < x0.size(); ++i) ref_added[i] = ref[i] - x0[i];
    for (const bool prefill : {false, true}) {
      DeviceBuffer<float> d_x(x0);
      d_scratch.poison();
      d_pairs.poison();  // rows of pairs another rank computes stay poison: never read
      auto down_into = [&](DeviceBuffer<float>& x, const float* add) {
        if (prefill) {
          kiln::moe_down_prefill<S>(as_bf16(d_act), as_bf16(down.device), d_ids.get(), d_weights.get(), d_scratch.get(),
                                    as_bf16_mut(d_pairs), add, x.get(), tokens, nullptr);
        } else {
          kiln::moe_down<S>(as_bf16(d_act), as_bf16(down.device), d_ids.get(), d_weights.get(), d_scratch.get(),
                            as_bf16_mut(d_pairs), add, x.get(), tokens, nullptr);
        }
      };
      if (prefill) {
        kiln::moe_gate_up_prefill<kBuckets>(as_bf16(d_h), as_bf16(gate_up), d_ids.get(), as_bf16_mut(d_gate_up_out),
                                            d_scratch.get(), tokens, nullptr);
      } else {
        kiln::moe_gate_up<kBuckets>(as_bf16(d_h), as_bf16(gate_up), d_ids.get(), as_bf16_mut(d_gate_up_out),
                                    d_scratch.get(), tokens, nullptr);
      }
      down_into(d_x, nullptr);
      const std::string what = std::string(prefill ? "moe_down_prefill" : "moe_down") + " experts " +
                               std::to_string(S.experts) + "/" + std::to_string(S.top_k) + " " + std::to_string(S.hidden) +
                               "x" + std::to_string(S.inter) + " tokens " + std::to_string(tokens) +
                               (other_ranks ? ", half the pairs another rank's" : "");
      check_launch(what);
      const auto got = d_x.download();
      std::vector<float> got_added(x0.size());
      for (size_t i = 0; i < x0.size(); ++i) got_added[i] = got[i] - x0[i];
      // Each pair's output is rounded to bf16 before it is weighted (as HF does).
      check_close(what + " (the added part)", ref_added, got_added, kBf16Limit);
      if (with_shared) {
        DeviceBuffer<float> d_x_shared(x0);
        down_into(d_x_shared, d_shared.get());
        check_launch(what + ", shared experts' output given");
        const auto got_shared = d_x_shared.download();
        size_t differ = 0;
        for (size_t i = 0; i < x0.size(); ++i) differ += got_shared[i] != got[i] + shared[i];
        INFO(what << ", shared experts' output given");
        CHECK(differ == 0);
      }
    }
  }
  kiln::moe_down<S>(nullptr, as_bf16(down.device), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr);
  kiln::moe_down_prefill<S>(nullptr, as_bf16(down.device), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr);
  check_launch("moe_down, 0 tokens");
}

}  // namespace

TEST_CASE("moe_down adds each token's weighted expert outputs", "[moe_down]") {
  // Under a sanitizer (quick_run) the tiny shapes stand for DeepSeek-V2-Lite's and DeepSeek-V2's
  // (the same decode and grouped-GEMM paths): initcheck takes over 8 minutes on the real ones.
  if (!quick_run()) {
    check_down<dsv2lite::kMoeExpertsDown>({1, 4, 64, 300, 2048});
    check_down<shape::moe_down{.experts = 160, .top_k = 6, .hidden = 5120, .inter = 1536, .sms = 132}>({1, 64});  // DeepSeek-V2
    // The streaming kernel's other column splits (moe_stream_splits), from more SMs than 132: 4 at 300, 8 at 1,000.
    constexpr shape::moe_down kLite = dsv2lite::kMoeExpertsDown;
    static_assert(detail::moe_stream_splits(kLite.hidden, kLite.inter, kLite.top_k, kLite.experts, kLite.sms) == 2);
    static_assert(detail::moe_stream_splits(kLite.hidden, kLite.inter, kLite.top_k, kLite.experts, 300) == 4);
    static_assert(detail::moe_stream_splits(kLite.hidden, kLite.inter, kLite.top_k, kLite.experts, 1000) == 8);
    check_down<shape::moe_down{.experts = kLite.experts, .top_k = kLite.top_k, .hidden = kLite.hidden,
                               .inter = kLite.inter, .sms = 300}>({1, 9, 64});
    check_down<shape::moe_down{.experts = kLite.experts, .top_k = kLite.top_k, .hidden = kLite.hidden,
                               .inter = kLite.inter, .sms = 1000}>({1, 9});
  }
  check_down<tiny_ds::kMoeExpertsDown>({1, 4, 64, 65, 300});
  check_down<tiny_ds_lite::kMoeExpertsDown>({1, 4, 64, 65, 300});
  check_down<shape::moe_down{.experts = 5, .top_k = 2, .hidden = 36, .inter = 10, .sms = 132}>({1, 65});  // 2-element rows
}

TEST_CASE("moe_down adds the shared experts' output after the routed experts' sum", "[moe_down]") {
  if (!quick_run()) check_down<dsv2lite::kMoeExpertsDown>({1, 64, 300}, false, true);  // (as above)
  check_down<tiny_ds::kMoeExpertsDown>({1, 65}, false, true);
}

TEST_CASE("moe_down adds nothing for pairs routed to another rank's experts", "[moe_down]") {
  if (!quick_run()) check_down<dsv2lite::kMoeExpertsDown>({1, 64, 300}, true);  // (as above)
  check_down<tiny_ds::kMoeExpertsDown>({1, 65}, true);
}

}  // namespace kiln::kernel_test
