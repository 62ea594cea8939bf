// moe_route (templates/moe_route.cuh) against ref::moe_route: the same experts in the same order,
// weights within 1e-5 relative, for both weight modes (scaled, renormalized) and group-limited
// routing; with an expert_usage array (--profile), exactly the chosen experts flagged.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "runtime/ref/moe.hpp"
#include "templates/moe_route.cuh"
#include "tests/kernels/kernel_test.hpp"

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

constexpr shape::moe_route renormalized(shape::moe_route s, bool normalize) {
  s.normalize = normalize;
  return s;
}

constexpr shape::moe_route split_over(shape::moe_route s, int ranks) {
  s.local_experts = s.experts / ranks;
  return s;
}

template <shape::moe_route S>
void check_route(const std::vector<int>& token_counts, int rank = 0) {
  std::mt19937 rng(26000 + S.experts * S.top_k + S.groups);
  constexpr int kLayer = 2, kLayers = 4;  // flags land in this layer's row of the usage array
  for (int tokens : token_counts) {
    const auto logits = make_logits(tokens, S.experts, rng);
    DeviceBuffer<float> d_logits(logits), d_weights(static_cast<size_t>(tokens) * S.top_k);
    DeviceBuffer<int> d_ids(static_cast<size_t>(tokens) * S.top_k);
    DeviceBuffer<unsigned char> d_usage(std::vector<unsigned char>(kLayers * S.experts, 0));
    d_ids.poison();
    d_weights.poison();
    kiln::moe_route<S>(d_logits.get(), d_ids.get(), d_weights.get(), tokens, rank, d_usage.get(), kLayer, nullptr);
    const std::string what = "moe_route experts " + std::to_string(S.experts) + " top " + std::to_string(S.top_k) +
                             " rank " + std::to_string(rank) + " holding " + std::to_string(S.local_experts) +
                             (S.group_limited ? " groups " + std::to_string(S.topk_groups) + "/" + std::to_string(S.groups) : "") +
                             (S.normalize ? " normalized" : " scaled") + " tokens " + std::to_string(tokens);
    check_launch(what);

    std::vector<int32_t> ref_ids(static_cast<size_t>(tokens) * S.top_k);
    std::vector<float> ref_weights(ref_ids.size());
    std::vector<uint8_t> ref_usage(kLayers * S.experts, 0);
    ref::moe_route(S, logits.data(), ref_ids.data(), ref_weights.data(), tokens, rank, ref_usage.data(), kLayer);
    const auto ids = d_ids.download();
    const auto weights = d_weights.download();
    long long id_mismatches = 0;
    double max_rel = 0.0;
    for (size_t i = 0; i < ids.size(); ++i) {
      id_mismatches += ids[i] != ref_ids[i];
      const double rel = std::abs(static_cast<double>(weights[i]) - ref_weights[i]) / std::abs(ref_weights[i]);
      max_rel = std::isnan(weights[i]) ? INFINITY : std::max(max_rel, rel);
    }
    INFO(what << ": " << id_mismatches << " ids differ; weights off by " << max_rel << " relative");
    CHECK(id_mismatches == 0);
    CHECK(max_rel <= 1e-5);
    const auto usage = d_usage.download();
    CHECK(std::vector<uint8_t>(usage.begin(), usage.end()) == ref_usage);
  }
  kiln::moe_route<S>(nullptr, nullptr, nullptr, 0, rank, nullptr, 0, nullptr);
  check_launch("moe_route, 0 tokens");
}

}  // namespace

TEST_CASE("moe_route picks the reference's experts and weights", "[moe_route]") {
  const std::vector<int> counts = {1, 64, 2048};
  check_route<dsv2lite::kMoeRoute>(counts);
  check_route<renormalized(dsv2lite::kMoeRoute, true)>(counts);
  // DeepSeek-V2: 160 experts in 8 groups, top 6 within the best 3 groups.
  constexpr shape::moe_route kV2{.experts = 160, .top_k = 6, .groups = 8, .topk_groups = 3, .group_limited = true,
                                 .normalize = false, .scaling = 16.0f, .local_experts = 160};
  check_route<kV2>(counts);
  check_route<renormalized(kV2, true)>(counts);
  // Expert parallelism: ranks holding a share of the experts.
  check_route<split_over(kV2, 4)>(counts, 2);
  check_route<split_over(dsv2lite::kMoeRoute, 2)>(counts, 1);
  check_route<split_over(tiny_ds::kMoeRoute, 4)>({1, 7, 300}, 3);
  check_route<tiny_ds::kMoeRoute>({1, 7, 300});
  check_route<tiny_ds_lite::kMoeRoute>({1, 7, 300});
  // 256 experts: 8 per lane.
  check_route<shape::moe_route{.experts = 256, .top_k = 8, .groups = 8, .topk_groups = 4, .group_limited = true,
                               .normalize = true, .scaling = 2.5f, .local_experts = 256}>({1, 64});
}

}  // namespace kiln::kernel_test
