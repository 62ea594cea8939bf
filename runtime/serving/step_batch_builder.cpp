#include "runtime/serving/step_batch_builder.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"

namespace kiln {

StepBatch build_step_batch(const PhaseStep& phase, int32_t page_size, StepBuffer& buffer) {
  if (page_size <= 0) fail("build_step_batch: page_size = ", page_size, ": expected > 0");
  const int32_t stride = buffer.capacity().pages_per_seq;
  int32_t num_logits = 0;
  for (const ScheduledSeq& s : phase.seqs) {
    const int32_t pages = (s.context_len() + page_size - 1) / page_size;
    if (s.new_tokens.empty() || s.start < 0 || static_cast<int32_t>(s.block_table.size()) < pages || pages > stride) {
      fail("build_step_batch: sequence ", s.id, " has ", s.new_tokens.size(), " new tokens at position ", s.start,
           " and ", s.block_table.size(), " pages; expected >= 1 token and ", pages, " pages (at most ", stride, ")");
    }
    if (phase.phase == StepPhase::decode && s.new_tokens.size() != 1) {
      fail("build_step_batch: decode sequence ", s.id, " brings ", s.new_tokens.size(), " tokens; expected 1");
    }
    num_logits += (s.samples ? 1 : 0) + (s.prompt_logits ? static_cast<int32_t>(s.new_tokens.size()) : 0) +
                  static_cast<int32_t>(s.prompt_targets.size());
  }

  StepBatch batch = buffer.view(phase.phase, phase.num_tokens, static_cast<int32_t>(phase.seqs.size()), num_logits);
  int32_t row = 0, sample_row = 0;
  int32_t capture_row = phase.num_samples();
  int32_t target_row = capture_row;
  for (const ScheduledSeq& s : phase.seqs) target_row += s.prompt_logits ? static_cast<int32_t>(s.new_tokens.size()) : 0;
  batch.num_samples = capture_row;
  batch.query_start[0] = 0;
  for (size_t si = 0; si < phase.seqs.size(); ++si) {
    const ScheduledSeq& s = phase.seqs[si];
    for (size_t j = 0; j < s.new_tokens.size(); ++j, ++row) {
      const int32_t position = s.start + static_cast<int32_t>(j);
      batch.token_ids[row] = s.new_tokens[j];
      batch.positions[row] = position;
      batch.slot_mapping[row] = s.block_table[position / page_size] * page_size + position % page_size;
      if (s.prompt_logits) batch.logit_rows[capture_row++] = row;
      if (j < s.prompt_targets.size()) batch.logit_rows[target_row++] = row;
    }
    if (s.samples) batch.logit_rows[sample_row++] = row - 1;
    batch.query_start[si + 1] = row;
    batch.context_len[si] = s.context_len();
    const int32_t pages = (s.context_len() + page_size - 1) / page_size;
    // Entries past a sequence's pages are never read (attention stops at context_len).
    std::copy_n(s.block_table.begin(), pages, batch.block_tables.data() + si * stride);
  }
  if (row != phase.num_tokens) fail("internal: phase of ", phase.num_tokens, " tokens has ", row, " rows");
  return batch;
}

std::vector<PromptLogitRows> prompt_logit_rows(const PhaseStep& phase) {
  std::vector<PromptLogitRows> out;
  int32_t first = phase.num_samples();
  for (const ScheduledSeq& s : phase.seqs) {
    if (!s.prompt_logits) continue;
    const int32_t count = static_cast<int32_t>(s.new_tokens.size());
    out.push_back({s.id, s.start, count, first});
    first += count;
  }
  return out;
}

std::vector<PromptLogitRows> prompt_target_rows(const PhaseStep& phase) {
  const std::vector<PromptLogitRows> kept = prompt_logit_rows(phase);
  int32_t first = kept.empty() ? phase.num_samples() : kept.back().first_row + kept.back().count;
  std::vector<PromptLogitRows> out;
  for (const ScheduledSeq& s : phase.seqs) {
    if (s.prompt_targets.empty()) continue;
    const int32_t count = static_cast<int32_t>(s.prompt_targets.size());
    out.push_back({s.id, s.start, count, first});
    first += count;
  }
  return out;
}

}  // namespace kiln
