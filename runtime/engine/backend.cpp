#include "runtime/engine/backend.hpp"

#include "runtime/core/error.hpp"

namespace kiln {

void check_step_fits(const ModelInfo& model, const StepBatch& step) {
  if (step.num_tokens() > model.max_batched_tokens) {
    fail("step of ", step.num_tokens(), " tokens exceeds max_batched_tokens (", model.max_batched_tokens, ")");
  }
}

StepCapacity step_capacity(const ModelInfo& m, StepPhase phase) {
  const int32_t pages_per_seq = (m.max_context + m.page_size - 1) / m.page_size;
  if (phase == StepPhase::decode) return {m.max_batch, m.max_batch, m.max_batch, pages_per_seq};
  // Logit rows: a sample per sequence, and at most two per token (prompt logits and prompt logprobs).
  return {m.max_batched_tokens, m.max_batch, 2 * m.max_batched_tokens + m.max_batch, pages_per_seq};
}

void check_logit_rows(int32_t first, int32_t count, int32_t available) {
  if (first < 0 || count < 0 || first + count > available) {
    fail("internal: logits rows ", first, "..", first + count, " requested, the step has ", available);
  }
}

}  // namespace kiln
