// CPU reference ops of DeepSeekMoE routing and routed experts. Shared experts are a dense MLP and
// use the ordinary ops.
#pragma once

#include <cstdint>

namespace kiln::ref {

// Per token: softmax over the router logits; the top_k experts (greedy, or within the topk_groups
// groups of highest max score when group_limited); their weights renormalized to sum to 1 when
// `normalize`, else multiplied by `scaling` (DeepSeek-V2's two options). Ties go to the lower id.
void moe_route(const float* logits, int64_t tokens, int64_t experts, int64_t top_k, int64_t groups,
               int64_t topk_groups, bool group_limited, bool normalize, float scaling, int32_t* ids,
               float* weights);

// usage[ids[t, j]] = 1 for every token's chosen experts (which experts this step read).
void moe_record(const int32_t* ids, int64_t tokens, int64_t top_k, uint8_t* usage);

// out[t, j] = h[t] · w[ids[t, j]]ᵀ, w: [experts, 2·inter, hidden] (gate rows, then up rows).
void moe_gate_up(const float* h, int64_t tokens, const int32_t* ids, int64_t top_k, const float* w, int64_t hidden,
                 int64_t inter, float* out);

// x[t] += Σ_j weights[t, j] · w[ids[t, j]] · act[t, j], w: [experts, hidden, inter].
void moe_down(const float* act, int64_t tokens, const int32_t* ids, const float* weights, int64_t top_k,
              const float* w, int64_t hidden, int64_t inter, float* x);

}  // namespace kiln::ref
