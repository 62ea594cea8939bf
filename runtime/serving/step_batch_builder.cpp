#include "runtime/serving/step_batch_builder.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"

namespace kiln {

StepBatch build_step_batch(std::span<const ScheduledSeq> seqs, int32_t page_size) {
  if (page_size <= 0) fail("build_step_batch: page_size = ", page_size, ": expected > 0");
  StepBatch batch;
  const int32_t num_seqs = static_cast<int32_t>(seqs.size());
  size_t num_tokens = 0;
  for (const ScheduledSeq& s : seqs) {
    const int32_t pages = (s.context_len() + page_size - 1) / page_size;
    if (s.new_tokens.empty() || s.start < 0 || static_cast<int32_t>(s.block_table.size()) < pages) {
      fail("build_step_batch: sequence ", s.id, " has ", s.new_tokens.size(), " new tokens at position ",
           s.start, " and ", s.block_table.size(), " pages; expected >= 1 token and >= ", pages, " pages");
    }
    batch.max_pages_per_seq = std::max(batch.max_pages_per_seq, pages);
    num_tokens += s.new_tokens.size();
  }

  batch.token_ids.reserve(num_tokens);
  batch.positions.reserve(num_tokens);
  batch.slot_mapping.reserve(num_tokens);
  batch.query_start.reserve(num_seqs + 1);
  batch.query_start.push_back(0);
  batch.block_tables.assign(static_cast<size_t>(num_seqs) * batch.max_pages_per_seq, kBlockTablePadding);
  for (int32_t si = 0; si < num_seqs; ++si) {
    const ScheduledSeq& s = seqs[si];
    for (size_t j = 0; j < s.new_tokens.size(); ++j) {
      const int32_t position = s.start + static_cast<int32_t>(j);
      batch.token_ids.push_back(s.new_tokens[j]);
      batch.positions.push_back(position);
      batch.slot_mapping.push_back(s.block_table[position / page_size] * page_size + position % page_size);
    }
    batch.query_start.push_back(batch.num_tokens());
    batch.context_len.push_back(s.context_len());
    const int32_t pages = (s.context_len() + page_size - 1) / page_size;
    std::copy_n(s.block_table.begin(), pages,
                batch.block_tables.begin() + static_cast<ptrdiff_t>(si) * batch.max_pages_per_seq);
    if (s.samples) batch.logit_rows.push_back(batch.num_tokens() - 1);
  }
  return batch;
}

std::vector<SamplerRow> sampler_rows(std::span<const ScheduledSeq> seqs) {
  std::vector<SamplerRow> rows;
  for (const ScheduledSeq& s : seqs) {
    if (s.samples) rows.push_back(s.sampler);
  }
  return rows;
}

}  // namespace kiln
