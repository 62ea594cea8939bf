// StepBatch — one forward step over a flat batch of tokens from several sequences (vLLM's
// "varlen" layout). The scheduler fills it; both backends' generated forwards consume it.
// Prefill chunks and decodes share it: a decode is a sequence with one new token.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln {

struct StepBatch {
  // Per token (T = token_ids.size()).
  std::vector<int32_t> token_ids;     // [T] input token of each row
  std::vector<int32_t> positions;     // [T] absolute position in its sequence (RoPE, causal mask)
  std::vector<int32_t> slot_mapping;  // [T] KV slot = page * page_size + offset within the page

  // Per sequence (S = context_len.size()).
  std::vector<int32_t> query_start;   // [S + 1] rows of sequence s are [query_start[s], query_start[s+1])
  std::vector<int32_t> context_len;   // [S] KV length of s after this step (cached + new tokens)
  std::vector<int32_t> block_tables;  // [S * max_pages_per_seq] page ids of s, in order
  int32_t max_pages_per_seq = 0;      // row stride of block_tables

  // Rows whose logits the step must produce, in output order: usually the last row of every
  // sequence that samples this step; every prompt row for --dump-logits.
  std::vector<int32_t> logit_rows;

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(context_len.size()); }
  int32_t num_logits() const { return static_cast<int32_t>(logit_rows.size()); }
  // True when every sequence contributes exactly one new token (the decode graph applies).
  bool decode_only() const { return num_tokens() == num_seqs(); }
};

}  // namespace kiln
