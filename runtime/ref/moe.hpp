// CPU reference ops of DeepSeekMoE routing and routed experts. Shared experts are a dense MLP and
// use the ordinary ops.
#pragma once

#include <cstdint>

#include "codegen/op_shapes.hpp"

namespace kiln::ref {

// Per token: softmax over the router logits; the top_k experts (greedy, or within the topk_groups
// groups of highest max score when group_limited); their weights renormalized to sum to 1 when
// `normalize`, else multiplied by `scaling` (DeepSeek-V2's two options). Ties go to the lower id.
// Expert parallelism: rank `rank` holds experts [rank·local_experts, +local_experts); its ids are
// given in that range (0 = its first) and -1 for another rank's expert, which moe_gate_up and
// moe_down skip. expert_usage: null, or [layers][experts] flags; this layer's row is set for every
// chosen expert the rank holds.
void moe_route(const shape::moe_route& s, const float* logits, int32_t* ids, float* weights, int64_t tokens, int rank,
               uint8_t* expert_usage, int layer);

// out[t, j] = h[t] · w[ids[t, j]]ᵀ, w: [experts, 2·inter, hidden] (gate rows, then up rows).
void moe_gate_up(const shape::moe_gate_up& s, const float* h, const float* w, const int32_t* ids, float* out,
                 int64_t tokens);

// x[t] += Σ_j weights[t, j] · w[ids[t, j]] · act[t, j], w: [experts, hidden, inter]; then x[t] +=
// shared[t] where shared ([tokens, hidden]) is given.
void moe_down(const shape::moe_down& s, const float* act, const float* w, const int32_t* ids, const float* weights,
              const float* shared, float* x, int64_t tokens);

}  // namespace kiln::ref
