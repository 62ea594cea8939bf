// StepBatch — one forward step over a flat batch of tokens from several sequences (vLLM's
// "varlen" layout), in one phase: a prefill step (prompt chunks) or a decode step (one new token
// per sequence). The scheduler decides the phase; the step builder writes the arrays once, straight
// into the backend's staging memory (a StepBuffer: for CUDA, pinned memory uploaded with one
// copy); both backends' generated forwards read them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kiln {

enum class StepPhase { prefill, decode };

// One KV page copied between the backend's pool and its host swap space (a preempted sequence's
// KV swapped out, or back in): every layer's part of the page.
struct PageSwap {
  int32_t device_page = 0;
  int32_t host_page = 0;
};

struct StepBatch {
  StepPhase phase = StepPhase::prefill;

  // Per token (T = token_ids.size()).
  std::span<int32_t> token_ids;     // [T] input token of each row
  std::span<int32_t> positions;     // [T] absolute position in its sequence (RoPE, causal mask)
  std::span<int32_t> slot_mapping;  // [T] KV slot = page * page_size + offset within the page

  // Per sequence (S = context_len.size()).
  std::span<int32_t> query_start;   // [S + 1] rows of sequence s are [query_start[s], query_start[s+1])
  std::span<int32_t> context_len;   // [S] KV length of s after this step (cached + new tokens)
  std::span<int32_t> block_tables;  // [S * max_pages_per_seq] page ids of s, in order
  int32_t max_pages_per_seq = 0;    // row stride of block_tables: the model's pages for its max context

  // Rows whose logits the step produces: first the last row of every sequence that samples (in
  // step order: logits row i is sampler row i), then every row of the prompt chunks whose request
  // asked for prompt logits.
  std::span<int32_t> logit_rows;
  int32_t num_samples = 0;

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(context_len.size()); }
  int32_t num_logits() const { return static_cast<int32_t>(logit_rows.size()); }
  int32_t max_query_len() const;
};

// The largest step a StepBuffer holds.
struct StepCapacity {
  int32_t max_tokens = 0;
  int32_t max_seqs = 0;
  int32_t max_logits = 0;
  int32_t pages_per_seq = 0;  // the block-table stride
};

// The memory of one phase's steps: every array of a StepBatch at a fixed offset of one int32
// buffer, sized for the largest step. Fixed offsets let a backend upload a step with one copy of
// a prefix of the buffer and replay captured graphs against the same device addresses. The
// per-sequence arrays come first, so a small step's prefix is short.
class StepBuffer {
 public:
  explicit StepBuffer(StepCapacity capacity, int32_t* memory = nullptr);  // null: owns a host vector
  StepBuffer(const StepBuffer&) = delete;  // views point into the memory: moves only
  StepBuffer& operator=(const StepBuffer&) = delete;
  StepBuffer(StepBuffer&&) = default;
  StepBuffer& operator=(StepBuffer&&) = default;
  static int64_t ints(const StepCapacity& capacity);

  // The arrays of a step of `tokens` rows, `seqs` sequences and `logits` logit rows, to be filled.
  StepBatch view(StepPhase phase, int32_t tokens, int32_t seqs, int32_t logits);
  // Ints from the start of the buffer that cover every array of `step` (one upload).
  int64_t used_ints(const StepBatch& step) const;
  // Where `array` (a span of a StepBatch of this buffer) starts, in ints from the buffer's start.
  int64_t offset_of(std::span<const int32_t> array) const { return array.data() - memory_; }
  const StepCapacity& capacity() const { return capacity_; }
  int32_t* data() { return memory_; }

 private:
  StepCapacity capacity_;
  std::vector<int32_t> owned_;
  int32_t* memory_;
  int64_t query_start_, context_len_, logit_rows_, token_ids_, positions_, slot_mapping_, block_tables_;
};

}  // namespace kiln
