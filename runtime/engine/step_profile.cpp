#include "runtime/engine/step_profile.hpp"

#include <algorithm>
#include <limits>

#include "runtime/core/error.hpp"

namespace kiln {

namespace {

// Families, in the order of a layer's stages (templates/decode_step.cuh): stage 0 is the embedding,
// stage 1 + 6l + i is the i-th of a layer, the last is the LM head.
constexpr const char* kLayerStages[] = {"qkv_proj", "attention", "attention merge", "o_proj", "gate_up_proj",
                                        "down_proj"};
enum Family { kEmbed = 0, kFirstLayerFamily = 1, kLmHead = 7, kFamilies = 8 };

}  // namespace

StepProfile::StepProfile(const ModelInfo& model) : model_(model) {
  stages_.push_back({"embed"});
  for (const char* name : kLayerStages) stages_.push_back({name});
  stages_.push_back({"lm_head"});
}

void StepProfile::add(std::span<const uint64_t> timeline, int32_t blocks, std::span<const int32_t> context_len) {
  const int32_t n = num_stages();
  if (blocks <= 0 || timeline.size() < static_cast<size_t>(n) * blocks * 2) {
    fail("internal: a decode-step timeline of ", timeline.size(), " values for ", n, " stages of ", blocks, " blocks");
  }
  const ModelInfo& m = model_;
  const double h = m.hidden_size, bf16 = 2;
  const double q_width = static_cast<double>(m.num_attention_heads) * m.head_dim;
  const double kv_width = static_cast<double>(m.num_key_value_heads) * m.head_dim;
  double kv_tokens = 0;
  for (int32_t len : context_len) kv_tokens += len;
  // Bytes of each family in one layer (or once, for embed and lm_head).
  const double family_bytes[kFamilies] = {
      h * bf16 * static_cast<double>(context_len.size()),  // the embedding rows
      (q_width + 2 * kv_width) * h * bf16,                 // qkv_proj
      kv_tokens * m.kv_elems_per_token * bf16,             // attention: the KV cache of every sequence
      0,                                                    // merge: partials only
      q_width * h * bf16,                                  // o_proj
      2.0 * m.intermediate_size * h * bf16,                // gate_up_proj
      static_cast<double>(m.intermediate_size) * h * bf16, // down_proj
      static_cast<double>(m.vocab_size) * h * bf16};       // lm_head
  auto start = [&](int32_t s) {
    uint64_t t = std::numeric_limits<uint64_t>::max();
    for (int32_t b = 0; b < blocks; ++b) t = std::min(t, timeline[2 * (static_cast<size_t>(s) * blocks + b)]);
    return t;
  };
  auto end = [&](int32_t s) {
    uint64_t t = 0;
    for (int32_t b = 0; b < blocks; ++b) t = std::max(t, timeline[2 * (static_cast<size_t>(s) * blocks + b) + 1]);
    return t;
  };
  uint64_t previous_end = start(0);
  for (int32_t s = 0; s < n; ++s) {
    const int family = s == 0 ? kEmbed : s == n - 1 ? kLmHead : kFirstLayerFamily + (s - 1) % 6;
    const uint64_t first = start(s), last = end(s);
    StageTiming& t = stages_[family];
    t.seconds += 1e-9 * static_cast<double>(last > previous_end ? last - previous_end : 0);
    t.wait_seconds += 1e-9 * static_cast<double>(first > previous_end ? first - previous_end : 0);
    t.bytes += family_bytes[family];
    previous_end = std::max(previous_end, last);
  }
  ++steps_;
}

}  // namespace kiln
