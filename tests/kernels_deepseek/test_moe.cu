// DeepSeekMoE routing and routed experts against the CPU reference: moe_route (ids identical,
// weights within 1e-5 relative, on random logits without ties), moe_gate_up and moe_down at T = 1,
// 4, 64 (streaming, decode) and 300 / 2048 (grouped GEMM, prefill) with tokens sharing experts.
// Real DeepSeek-V2-Lite and V2 shapes, the tiny models', and odd ones (rows of 4 and 2 elements).
//
// The real expert tensors hold kDistinct different matrices repeated over all experts (the device
// copy is full size, so the kernels address every expert); the reference multiplies with the
// distinct ones through ids mapped e -> e % kDistinct.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "runtime/ref/moe.hpp"
#include "templates/moe.cuh"
#include "tests/kernels_deepseek/deepseek_groups.hpp"
#include "tests/support/gpu_harness.hpp"

namespace kiln::kernel_test {

namespace {

// Router logits whose softmax scores have no ties: a random permutation of evenly spaced values
// (3% apart in score) plus small noise, shifted per token.
std::vector<float> make_logits(int tokens, int experts, std::mt19937& rng) {
  std::uniform_real_distribution<float> noise(-0.005f, 0.005f), shift(-3.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(tokens) * experts);
  std::vector<int> order(experts);
  for (int t = 0; t < tokens; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    const float base = shift(rng);
    for (int e = 0; e < experts; ++e) logits[static_cast<size_t>(t) * experts + e] = base + 0.03f * order[e] + noise(rng);
  }
  return logits;
}

template <int kExperts, int kTopK, int kGroups, int kTopkGroups, bool kGroupLimited, bool kNormalize>
void test_route(const char* model, float scaling, const std::vector<int>& token_counts, bool time_it) {
  std::mt19937 rng(26000 + kExperts * kTopK + kGroups);
  for (int tokens : token_counts) {
    const auto logits = make_logits(tokens, kExperts, rng);
    DeviceBuffer<float> d_logits(logits), d_weights(static_cast<size_t>(tokens) * kTopK);
    DeviceBuffer<int> d_ids(static_cast<size_t>(tokens) * kTopK);
    d_ids.poison();
    d_weights.poison();
    auto run = [&] {
      kiln::moe_route<kExperts, kTopK, kGroups, kTopkGroups, kGroupLimited, kNormalize>(
          d_logits.get(), d_ids.get(), d_weights.get(), tokens, scaling, nullptr);
    };
    run();
    const std::string shape = std::string(model) + " experts " + std::to_string(kExperts) + " top " +
                              std::to_string(kTopK) + (kGroupLimited ? " groups " + std::to_string(kTopkGroups) +
                                                                           "/" + std::to_string(kGroups)
                                                                     : std::string()) +
                              (kNormalize ? " normalized" : " scaled") + " T " + std::to_string(tokens);
    expect_clean_launch("moe_route " + shape);

    std::vector<int32_t> ref_ids(static_cast<size_t>(tokens) * kTopK);
    std::vector<float> ref_weights(ref_ids.size());
    ref::moe_route(logits.data(), tokens, kExperts, kTopK, kGroups, kTopkGroups, kGroupLimited, kNormalize, scaling,
                   ref_ids.data(), ref_weights.data());
    const auto ids = d_ids.download();
    const auto weights = d_weights.download();
    long long id_mismatches = 0;
    double max_rel = 0.0;
    for (size_t i = 0; i < ids.size(); ++i) {
      id_mismatches += ids[i] != ref_ids[i];
      const double rel = std::abs(static_cast<double>(weights[i]) - ref_weights[i]) / std::abs(ref_weights[i]);
      max_rel = std::isnan(weights[i]) ? INFINITY : std::max(max_rel, rel);
    }
    expect(id_mismatches == 0, "moe_route " + shape + ": " + std::to_string(id_mismatches) + " ids differ");
    expect(max_rel <= 1e-5, "moe_route " + shape + ": weights off by " + std::to_string(max_rel) + " relative");
    if (time_it) {
      const double us = median_us([&](int) { run(); });
      report("moe_route", shape, max_rel, us, tokens * kExperts * 4.0, 0);
    }
  }
  kiln::moe_route<kExperts, kTopK, kGroups, kTopkGroups, kGroupLimited, kNormalize>(nullptr, nullptr, nullptr, 0,
                                                                                    scaling, nullptr);
  expect_clean_launch("moe_route with 0 tokens");
}

// Each token's kTopK distinct experts, drawn mostly from a small popular set so that tokens share
// experts even in small batches.
std::vector<int> make_ids(int tokens, int experts, int top_k, std::mt19937& rng) {
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

// Expert tensor [kExperts][rows][cols] on the device made of `distinct` random matrices repeated.
struct ExpertTensor {
  std::vector<uint16_t> distinct;  // [distinct][rows][cols]
  std::vector<float> distinct_f;
  DeviceBuffer<uint16_t> device;
  ExpertTensor(int experts, int distinct_count, size_t matrix, std::mt19937& rng, float scale)
      : distinct(random_bf16(matrix * distinct_count, rng, scale)),
        distinct_f(bf16_to_f32(distinct)),
        device(matrix * experts) {
    for (int e = 0; e < experts; ++e) {
      KILN_CUDA_OK(cudaMemcpy(device.get() + matrix * e, distinct.data() + matrix * (e % distinct_count), matrix * 2,
                              cudaMemcpyHostToDevice));
    }
  }
};

template <int kExperts, int kTopK, int kHidden, int kInter>
void test_experts(const char* model, const std::vector<int>& token_counts, bool time_it) {
  constexpr int kDistinct = kExperts < 8 ? kExperts : 8;
  constexpr int kRows = 2 * kInter;
  std::mt19937 rng(27000 + kExperts * kHidden + kInter);
  const size_t gate_up_matrix = static_cast<size_t>(kRows) * kHidden, down_matrix = static_cast<size_t>(kHidden) * kInter;
  ExpertTensor gate_up(kExperts, kDistinct, gate_up_matrix, rng, 1.0f / std::sqrt(static_cast<float>(kHidden)));
  ExpertTensor down(kExperts, kDistinct, down_matrix, rng, 1.0f / std::sqrt(static_cast<float>(kInter)));

  for (int tokens : token_counts) {
    const int pairs = tokens * kTopK;
    const auto ids = make_ids(tokens, kExperts, kTopK, rng);
    std::vector<int32_t> mapped(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) mapped[i] = ids[i] % kDistinct;
    const int used = static_cast<int>(std::set<int>(ids.begin(), ids.end()).size());
    const auto h = random_bf16(static_cast<size_t>(tokens) * kHidden, rng);
    const auto act = random_bf16(static_cast<size_t>(pairs) * kInter, rng);
    std::uniform_real_distribution<float> weight_dist(0.05f, 1.0f);
    std::vector<float> weights(pairs);
    for (auto& w : weights) w = weight_dist(rng);
    const auto x0 = random_f32(static_cast<size_t>(tokens) * kHidden, rng, 1.0f);

    DeviceBuffer<uint16_t> d_h(h), d_act(act), d_out(static_cast<size_t>(pairs) * kRows);
    DeviceBuffer<int> d_ids(ids), d_scratch(kExperts + 1 + static_cast<size_t>(pairs));
    DeviceBuffer<float> d_weights(weights), d_x(x0);
    d_out.poison();
    d_scratch.poison();
    const std::string shape = std::string(model) + " experts " + std::to_string(kExperts) + "/" +
                              std::to_string(kTopK) + " " + std::to_string(kHidden) + "x" + std::to_string(kInter) +
                              " T " + std::to_string(tokens);

    // ---- gate_up ----
    auto run_gate_up = [&](const int* ids_dev, int* scratch) {
      kiln::moe_gate_up<kExperts, kTopK, kHidden, kInter>(as_bf16(d_h), as_bf16(gate_up.device), ids_dev,
                                                          as_bf16_mut(d_out), scratch, tokens, nullptr);
    };
    run_gate_up(d_ids.get(), d_scratch.get());
    expect_clean_launch("moe_gate_up " + shape);
    std::vector<float> ref_out(static_cast<size_t>(pairs) * kRows);
    ref::moe_gate_up(bf16_to_f32(h).data(), tokens, mapped.data(), kTopK, gate_up.distinct_f.data(), kHidden, kInter,
                     ref_out.data());
    const auto c_gu = compare(ref_out, bf16_to_f32(d_out.download()));
    expect_close("moe_gate_up " + shape, c_gu, 5e-4);

    // ---- down (uses the buckets gate_up left in scratch) ----
    auto run_down = [&](const int* ids_dev, const int* scratch) {
      kiln::moe_down<kExperts, kTopK, kHidden, kInter>(as_bf16(d_act), as_bf16(down.device), ids_dev,
                                                       d_weights.get(), scratch, d_x.get(), tokens, nullptr);
    };
    run_down(d_ids.get(), d_scratch.get());
    expect_clean_launch("moe_down " + shape);
    std::vector<float> ref_x = x0;
    ref::moe_down(bf16_to_f32(act).data(), tokens, mapped.data(), weights.data(), kTopK, down.distinct_f.data(),
                  kHidden, kInter, ref_x.data());
    const auto got_x = d_x.download();
    std::vector<float> ref_delta(x0.size()), got_delta(x0.size());
    for (size_t i = 0; i < x0.size(); ++i) {
      ref_delta[i] = ref_x[i] - x0[i];
      got_delta[i] = got_x[i] - x0[i];
    }
    const auto c_down = compare(ref_delta, got_delta);
    expect_close("moe_down " + shape + " (added part)", c_down, 1e-5);

    if (time_it) {
      // Rotate over id sets shifted by whole groups of experts, so that consecutive calls read
      // different experts (from DRAM), each set with its own buckets.
      constexpr int kSets = 8;
      std::vector<std::unique_ptr<DeviceBuffer<int>>> set_ids, set_scratch;
      for (int s = 0; s < kSets; ++s) {
        std::vector<int> shifted(ids);
        for (auto& e : shifted) e = (e + s * kTopK * 2) % kExperts;
        set_ids.push_back(std::make_unique<DeviceBuffer<int>>(shifted));
        set_scratch.push_back(std::make_unique<DeviceBuffer<int>>(kExperts + 1 + static_cast<size_t>(pairs)));
        run_gate_up(set_ids[s]->get(), set_scratch[s]->get());
      }
      expect_clean_launch("moe_gate_up id sets");
      const double us_gu = median_us([&](int i) { run_gate_up(set_ids[i % kSets]->get(), set_scratch[i % kSets]->get()); });
      const double us_down = median_us([&](int i) { run_down(set_ids[i % kSets]->get(), set_scratch[i % kSets]->get()); });
      if (tokens <= 64) {  // decode: bound by the used experts' bytes
        report("moe_gate_up", shape + " used " + std::to_string(used), c_gu.nmse, us_gu, used * gate_up_matrix * 2.0, 0);
        report("moe_down", shape + " used " + std::to_string(used), c_down.nmse, us_down, used * down_matrix * 2.0, 0);
      } else {
        report("moe_gate_up", shape, c_gu.nmse, us_gu, 0, 2.0 * pairs * kRows * kHidden);
        report("moe_down", shape, c_down.nmse, us_down, 0, 2.0 * pairs * kHidden * kInter);
      }
    }
  }
  kiln::moe_gate_up<kExperts, kTopK, kHidden, kInter>(nullptr, as_bf16(gate_up.device), nullptr, nullptr, nullptr, 0,
                                                      nullptr);
  kiln::moe_down<kExperts, kTopK, kHidden, kInter>(nullptr, as_bf16(down.device), nullptr, nullptr, nullptr, nullptr, 0,
                                                   nullptr);
  expect_clean_launch("moe_gate_up / moe_down with 0 tokens");
}

}  // namespace

void run_moe_tests() {
  // ---- routing: the generated instantiations, and the other weight mode of each ----
  const std::vector<int> counts = {1, 64, 2048};
  test_route<64, 6, 1, 1, false, false>("deepseek-v2-lite", 1.0f, counts, true);
  test_route<64, 6, 1, 1, false, true>("deepseek-v2-lite", 1.0f, counts, false);
  test_route<160, 6, 8, 3, true, false>("deepseek-v2", 16.0f, counts, true);
  test_route<160, 6, 8, 3, true, true>("deepseek-v2", 16.0f, counts, false);
  test_route<8, 3, 4, 2, true, false>("tiny-deepseek-v2", 2.5f, {1, 7, 300}, false);
  test_route<6, 2, 1, 1, false, true>("tiny-deepseek-v2-lite", 1.0f, {1, 7, 300}, false);
  test_route<256, 8, 8, 4, true, true>("odd 256 experts", 2.5f, {1, 64}, false);

  // ---- routed experts: decode (streaming) and prefill (grouped GEMM) ----
  test_experts<64, 6, 2048, 1408>("deepseek-v2-lite", {1, 4, 64, 300, 2048}, true);
  test_experts<160, 6, 5120, 1536>("deepseek-v2", {1, 4, 64, 300}, true);
  test_experts<8, 3, 64, 24>("tiny-deepseek-v2", {1, 4, 64, 65, 300}, false);
  test_experts<6, 2, 48, 20>("tiny-deepseek-v2-lite", {1, 4, 64, 65, 300}, false);
  test_experts<5, 2, 36, 10>("odd (4- and 2-element rows)", {1, 4, 64, 65, 300}, false);
}

}  // namespace kiln::kernel_test
