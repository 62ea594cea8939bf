// Turns a scheduled step into the flat batch the forward consumes (runtime/core/step_batch.hpp) and
// the sampler rows for its logits.
#pragma once

#include <span>
#include <vector>

#include "runtime/core/step_batch.hpp"
#include "runtime/serving/scheduled_step.hpp"

namespace kiln {

// Rows in step order; block_tables rows cover each sequence's context_len and are padded with
// kBlockTablePadding up to the longest one (max_pages_per_seq). logit_rows holds the last row of
// every sequence that samples, in step order.
StepBatch build_step_batch(std::span<const ScheduledSeq> seqs, int32_t page_size);
inline StepBatch build_step_batch(const ScheduledStep& step, int32_t page_size) {
  return build_step_batch(step.seqs, page_size);
}

// Padding in block_tables beyond a sequence's pages: a valid page id, so a kernel that reads a
// padded entry stays in bounds; attention never uses it (it stops at context_len).
constexpr int32_t kBlockTablePadding = 0;

// One row per sampling sequence, in the order of StepBatch::logit_rows.
std::vector<SamplerRow> sampler_rows(std::span<const ScheduledSeq> seqs);
inline std::vector<SamplerRow> sampler_rows(const ScheduledStep& step) { return sampler_rows(step.seqs); }

}  // namespace kiln
