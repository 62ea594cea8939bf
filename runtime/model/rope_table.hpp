// The RoPE cos/sin table [position][rotary_dim / 2][cos, sin], computed once at load the way HF
// transformers computes it (fp32 inverse frequencies, llama3 / YaRN adjustments, YaRN's attention
// factor folded into cos and sin), shared by both backends.
#pragma once

#include <vector>

#include "runtime/model/model_def.hpp"

namespace kiln {

// The inverse frequencies, rotary_dim / 2 of them.
std::vector<float> rope_inv_freq(const RopeInfo& rope);
// Llama 3.1 scaling as llama.cpp stores it (rope_freqs.weight): per frequency, the divisor applied to
// theta's unscaled frequency, rope_inv_freq of standard rope / rope_inv_freq(rope).
std::vector<float> rope_freq_divisors(const RopeInfo& rope);
// The factor cos and sin are scaled by (YaRN's mscale ratio; 1 otherwise).
double rope_attention_factor(const RopeInfo& rope);
std::vector<float> build_rope_table(const RopeInfo& rope, int32_t positions);
// YaRN's softmax-scale correction for MLA (DeepSeek): mscale(factor, mscale_all_dim)², else 1.
double yarn_softmax_scale_factor(const RopeInfo& rope);

}  // namespace kiln
