#include "runtime/core/step_batch.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"

namespace kiln {

int32_t StepBatch::max_query_len() const {
  int32_t longest = 0;
  for (int32_t s = 0; s < num_seqs(); ++s) longest = std::max(longest, query_start[s + 1] - query_start[s]);
  return longest;
}

StepBuffer::StepBuffer(StepCapacity capacity, int32_t* memory) : capacity_(capacity), memory_(memory) {
  const StepCapacity& c = capacity_;
  if (c.max_tokens <= 0 || c.max_seqs <= 0 || c.max_logits <= 0 || c.pages_per_seq <= 0) {
    fail("internal: step buffer capacity ", c.max_tokens, " tokens, ", c.max_seqs, " sequences, ", c.max_logits,
         " logit rows, ", c.pages_per_seq, " pages per sequence: expected all > 0");
  }
  query_start_ = 0;
  context_len_ = query_start_ + c.max_seqs + 1;
  logit_rows_ = context_len_ + c.max_seqs;
  token_ids_ = logit_rows_ + c.max_logits;
  positions_ = token_ids_ + c.max_tokens;
  slot_mapping_ = positions_ + c.max_tokens;
  block_tables_ = slot_mapping_ + c.max_tokens;
  if (memory_ == nullptr) {
    owned_.assign(static_cast<size_t>(ints(c)), 0);
    memory_ = owned_.data();
  }
}

int64_t StepBuffer::ints(const StepCapacity& c) {
  return 2 * static_cast<int64_t>(c.max_seqs) + 1 + c.max_logits + 3 * static_cast<int64_t>(c.max_tokens) +
         static_cast<int64_t>(c.max_seqs) * c.pages_per_seq;
}

StepBatch StepBuffer::view(StepPhase phase, int32_t tokens, int32_t seqs, int32_t logits) {
  const StepCapacity& c = capacity_;
  if (tokens < 0 || tokens > c.max_tokens || seqs < 0 || seqs > c.max_seqs || logits < 0 || logits > c.max_logits) {
    fail("internal: step of ", tokens, " tokens, ", seqs, " sequences and ", logits, " logit rows exceeds its buffer (",
         c.max_tokens, ", ", c.max_seqs, ", ", c.max_logits, ")");
  }
  StepBatch b;
  b.phase = phase;
  b.query_start = {memory_ + query_start_, static_cast<size_t>(seqs) + 1};
  b.context_len = {memory_ + context_len_, static_cast<size_t>(seqs)};
  b.logit_rows = {memory_ + logit_rows_, static_cast<size_t>(logits)};
  b.token_ids = {memory_ + token_ids_, static_cast<size_t>(tokens)};
  b.positions = {memory_ + positions_, static_cast<size_t>(tokens)};
  b.slot_mapping = {memory_ + slot_mapping_, static_cast<size_t>(tokens)};
  b.block_tables = {memory_ + block_tables_, static_cast<size_t>(seqs) * c.pages_per_seq};
  b.max_pages_per_seq = c.pages_per_seq;
  return b;
}

int64_t StepBuffer::used_ints(const StepBatch& step) const {
  return block_tables_ + static_cast<int64_t>(step.num_seqs()) * capacity_.pages_per_seq;
}

}  // namespace kiln
