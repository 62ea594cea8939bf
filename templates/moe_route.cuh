// DeepSeekMoE routing (ref::moe_route): one warp per token: softmax over the router logits,
// optional group limit, greedy top-k, weights renormalized or scaled, ids made this rank's
// (expert parallelism). With an expert_usage array
// (--profile), also flags each chosen (layer, expert): the weights a decode step reads.
#pragma once

#include "templates/common.cuh"

namespace kiln {

namespace detail {

// =====================================================================================
// Routing
// =====================================================================================

// Warp argmax over (value, index): larger value, then lower index. Every lane gets the result.
__device__ __forceinline__ void warp_argmax(float& value, int& index) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float v = __shfl_xor_sync(0xffffffffu, value, offset);
    const int i = __shfl_xor_sync(0xffffffffu, index, offset);
    if (v > value || (v == value && i < index)) {
      value = v;
      index = i;
    }
  }
}

template <int kExperts, int kLocalExperts, int kTopK, int kGroups, int kTopkGroups, bool kGroupLimited, bool kNormalize>
__global__ void __launch_bounds__(kWarpRowThreads) moe_route_kernel(const float* __restrict__ logits, int* __restrict__ ids,
                                                         float* __restrict__ weights, int tokens, float scaling,
                                                         int first_local, unsigned char* __restrict__ usage) {
  pdl_release_and_wait();
  constexpr int kPer = ceil_div(kExperts, 32);  // experts per lane: e = lane + 32·i
  constexpr int kBig = 0x7fffffff;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long t = static_cast<long long>(blockIdx.x) * kWarpRowsPerBlock + warp;
  if (t >= tokens) return;
  const float* l = logits + t * kExperts;

  // Softmax. Experts that do not exist hold -inf from here on, below every real score (>= 0).
  float s[kPer];
  float max_logit = neg_inf();
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = lane + 32 * i;
    s[i] = e < kExperts ? l[e] : neg_inf();
    max_logit = fmaxf(max_logit, s[i]);
  }
  max_logit = warp_max(max_logit);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    if (lane + 32 * i < kExperts) {
      s[i] = expf(s[i] - max_logit);
      sum += s[i];
    }
  }
  sum = warp_sum(sum);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    if (lane + 32 * i < kExperts) s[i] = s[i] / sum;
  }

  if constexpr (kGroupLimited) {
    // Keep the kTopkGroups groups with the highest max score; the others' experts score 0.
    constexpr int kPerGroup = kExperts / kGroups;
    __shared__ float group_scores[kWarpRowsPerBlock][kExperts];  // each warp's token
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (lane + 32 * i < kExperts) group_scores[warp][lane + 32 * i] = s[i];
    }
    __syncwarp();
    float group_max = neg_inf();
    if (lane < kGroups) {
      for (int k = 0; k < kPerGroup; ++k) group_max = fmaxf(group_max, group_scores[warp][lane * kPerGroup + k]);
    }
    unsigned keep = 0;
    for (int r = 0; r < kTopkGroups; ++r) {
      float v = lane < kGroups && !((keep >> lane) & 1u) ? group_max : neg_inf();
      int idx = lane < kGroups && !((keep >> lane) & 1u) ? lane : kBig;
      warp_argmax(v, idx);
      keep |= 1u << idx;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      if (e < kExperts && !((keep >> (e / kPerGroup)) & 1u)) s[i] = 0.0f;
    }
  }

  // Greedy top-k: lane j keeps the j-th choice.
  int my_id = 0;
  float my_score = 0.0f, total = 0.0f;
  for (int r = 0; r < kTopK; ++r) {
    float v = neg_inf();
    int idx = kBig;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (s[i] > v) {  // strict: within a lane the lower index wins a tie
        v = s[i];
        idx = lane + 32 * i;
      }
    }
    warp_argmax(v, idx);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (lane + 32 * i == idx) s[i] = neg_inf();
    }
    if (lane == r) {
      my_id = idx;
      my_score = v;
    }
    total += v;  // in choice order, as the reference sums
  }
  if (lane < kTopK) {
    const int local = my_id - first_local;
    const bool mine = local >= 0 && local < kLocalExperts;
    ids[t * kTopK + lane] = mine ? local : -1;
    weights[t * kTopK + lane] = kNormalize ? my_score / (total + 1e-20f) : my_score * scaling;
    if (usage != nullptr && mine) usage[my_id] = 1;
  }
}

}  // namespace detail

// logits [T, experts] fp32 -> ids, weights [T, top_k] in order of descending score.
// Expert parallelism: this rank holds experts [rank·local_experts, +local_experts); ids are given
// in that range (0 = its first), and -1 for another rank's expert (the expert kernels skip those).
// expert_usage: null, or [layers][experts] flags (this layer's row is set for every chosen expert
// this rank holds).
template <shape::moe_route S>
void moe_route(const float* logits, int* ids, float* weights, int tokens, int rank, unsigned char* expert_usage,
               int layer, cudaStream_t stream) {
  constexpr int kExperts = S.experts, kTopK = S.top_k, kGroups = S.groups, kTopkGroups = S.topk_groups;
  static_assert(kExperts > 0 && kTopK > 0 && kTopK <= kExperts && kTopK <= 32,
                "moe_route: 1 <= top_k <= min(experts, 32)");
  static_assert(S.local_experts > 0 && kExperts % S.local_experts == 0,
                "moe_route: local_experts must divide the experts (each rank holds as many)");
  static_assert(!S.group_limited || (kGroups > 0 && kGroups <= 32 && kExperts % kGroups == 0 &&
                                     kTopkGroups > 0 && kTopkGroups <= kGroups),
                "moe_route: groups must split the experts evenly, at most 32 groups, 1 <= topk_groups <= groups");
  if (tokens <= 0) return;
  unsigned char* usage = expert_usage != nullptr ? expert_usage + static_cast<long long>(layer) * kExperts : nullptr;
  auto kernel =
      detail::moe_route_kernel<kExperts, S.local_experts, kTopK, kGroups, kTopkGroups, S.group_limited, S.normalize>;
  KILN_LAUNCH(kernel, detail::ceil_div(tokens, detail::kWarpRowsPerBlock), detail::kWarpRowThreads, 0, stream, logits,
              ids, weights, tokens, S.scaling, rank * S.local_experts, usage);
}

}  // namespace kiln
