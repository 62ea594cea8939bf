#include "runtime/ref/moe.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "runtime/core/parallel.hpp"

namespace kiln::ref {

namespace {

// The k largest of `values` (ties to the lower index), in descending order.
std::vector<int64_t> top_indices(const std::vector<float>& values, int64_t k) {
  std::vector<int64_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
    return values[a] != values[b] ? values[a] > values[b] : a < b;
  });
  order.resize(k);
  return order;
}

}  // namespace

void moe_route(const shape::moe_route& s, const float* logits, int32_t* ids, float* weights, int64_t tokens, int rank,
               uint8_t* expert_usage, int layer) {
  const int64_t experts = s.experts, top_k = s.top_k, groups = s.groups;
  std::vector<float> scores(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* l = logits + t * experts;
    const float max_logit = *std::max_element(l, l + experts);
    double sum = 0;
    for (int64_t e = 0; e < experts; ++e) sum += (scores[e] = std::exp(l[e] - max_logit));
    for (float& s : scores) s = static_cast<float>(s / sum);

    std::vector<float> candidates = scores;
    if (s.group_limited) {  // keep the topk_groups groups with the highest max score
      const int64_t per_group = experts / groups;
      std::vector<float> group_max(groups);
      for (int64_t gi = 0; gi < groups; ++gi) {
        group_max[gi] = *std::max_element(scores.begin() + gi * per_group, scores.begin() + (gi + 1) * per_group);
      }
      std::vector<bool> keep(groups, false);
      for (int64_t gi : top_indices(group_max, s.topk_groups)) keep[gi] = true;
      for (int64_t e = 0; e < experts; ++e) {
        if (!keep[e / per_group]) candidates[e] = 0.0f;
      }
    }
    const std::vector<int64_t> chosen = top_indices(candidates, top_k);
    float total = 0;
    for (int64_t j = 0; j < top_k; ++j) total += candidates[chosen[j]];
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t local = chosen[j] - static_cast<int64_t>(rank) * s.local_experts;
      const bool mine = local >= 0 && local < s.local_experts;
      ids[t * top_k + j] = mine ? static_cast<int32_t>(local) : -1;
      const float w = candidates[chosen[j]];
      weights[t * top_k + j] = s.normalize ? w / (total + 1e-20f) : w * s.scaling;
      if (expert_usage != nullptr && mine) expert_usage[static_cast<int64_t>(layer) * experts + chosen[j]] = 1;
    }
  }
}

void moe_gate_up(const shape::moe_gate_up& s, const float* h, const float* w, const int32_t* ids, float* out,
                 int64_t tokens) {
  const int64_t top_k = s.top_k, hidden = s.hidden, inter = s.inter;
  parallel_for(tokens * top_k * 2 * inter, 64, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t pair = item / (2 * inter), row = item % (2 * inter);
      const int64_t t = pair / top_k;
      if (ids[pair] < 0) continue;  // another rank's expert
      const float* wr = w + (static_cast<int64_t>(ids[pair]) * 2 * inter + row) * hidden;
      const float* x = h + t * hidden;
      double acc = 0;
      for (int64_t i = 0; i < hidden; ++i) acc += static_cast<double>(x[i]) * wr[i];
      out[pair * 2 * inter + row] = static_cast<float>(acc);
    }
  });
}

void moe_down(const shape::moe_down& s, const float* act, const float* w, const int32_t* ids, const float* weights,
              const float* shared, float* x, int64_t tokens) {
  const int64_t top_k = s.top_k, hidden = s.hidden, inter = s.inter;
  parallel_for(tokens * hidden, 64, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / hidden, row = item % hidden;
      double sum = 0;
      for (int64_t j = 0; j < top_k; ++j) {
        const int64_t pair = t * top_k + j;
        if (ids[pair] < 0) continue;  // another rank's expert
        const float* wr = w + (static_cast<int64_t>(ids[pair]) * hidden + row) * inter;
        const float* a = act + pair * inter;
        double acc = 0;
        for (int64_t i = 0; i < inter; ++i) acc += static_cast<double>(a[i]) * wr[i];
        sum += weights[pair] * acc;
      }
      x[item] += static_cast<float>(sum);
      if (shared != nullptr) x[item] += shared[item];
    }
  });
}

}  // namespace kiln::ref
