// The per-stage profile of the whole-step decode kernel (--profile): how long each stage family of
// a decode step took on the GPU and how many bytes it read, from the timeline the kernel writes
// (templates/blocks/step_sync.cuh). No peer reports this; it says where a step's time goes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/model/model_def.hpp"

namespace kiln {

struct StageTiming {
  std::string name;         // "qkv_proj", "attention", ... (a family: its stages of every layer)
  double seconds = 0;       // summed over steps: from the previous stage's last block to this one's
  double wait_seconds = 0;  // of which: from the previous stage's last block to this one's first start
  double bytes = 0;         // summed over steps: weights (and KV cache) the family read
};

class StepProfile {
 public:
  explicit StepProfile(const ModelInfo& model);

  // One step's timeline: [stage][block] (start, end) in ns, `blocks` blocks; the step's sequences'
  // context lengths (the attention's KV bytes).
  void add(std::span<const uint64_t> timeline, int32_t blocks, std::span<const int32_t> context_len);

  int64_t steps() const { return steps_; }
  const std::vector<StageTiming>& stages() const { return stages_; }
  // The stages of one step: embed, 6 per layer, lm_head (the kernel's numbering).
  int32_t num_stages() const { return 2 + 6 * model_.num_layers; }

 private:
  const ModelInfo& model_;
  std::vector<StageTiming> stages_;  // by family
  int64_t steps_ = 0;
};

}  // namespace kiln
