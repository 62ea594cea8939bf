// What the scheduler decided for one forward step: which sequences run which tokens, in batch order.
// Self-contained (tokens and block tables are copied in), so build_step_batch is a pure function.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/serving/request_id.hpp"
#include "runtime/serving/sample_batch.hpp"
#include "runtime/serving/sampling_math.hpp"

namespace kiln {

struct ScheduledSeq {
  RequestId id = 0;
  int32_t start = 0;                  // position of the first new token = tokens already in the KV cache
  std::vector<int32_t> new_tokens;    // tokens fed this step: 1 for a decode, a chunk for a prefill
  std::vector<int32_t> block_table;   // the sequence's pages, covering at least start + new_tokens.size()
  bool samples = false;               // the step ends at the last known token: sample the next one
  SamplerRow sampler;                 // valid when samples
  std::vector<LogitEdit> edits;       // when samples: logit_bias, min_tokens and penalties (sample_batch.hpp)
  // Prompt logprobs (params.prompt_logprobs): the prompt tokens that rows 0, 1, ... of this chunk
  // predict (positions start + 1, ...; the sampling row, if any, is not among them), and the top-N.
  std::vector<int32_t> prompt_targets;
  int32_t prompt_top_logprobs = 0;

  int32_t context_len() const { return start + static_cast<int32_t>(new_tokens.size()); }
};

struct ScheduledStep {
  std::vector<ScheduledSeq> seqs;     // decodes first, then prefill continuations, then new prefills
  int32_t num_decodes = 0;            // seqs[0, num_decodes) are decodes
  int32_t num_tokens = 0;             // Σ new_tokens.size()
  std::vector<RequestId> preempted;   // sent back to the waiting queue while scheduling this step

  bool empty() const { return seqs.empty(); }
  int32_t num_samples() const {
    int32_t n = 0;
    for (const ScheduledSeq& s : seqs) n += s.samples ? 1 : 0;
    return n;
  }
};

// The sampler rows and logit edits of a step's sampling sequences, in step order
// (= StepBatch::logit_rows order).
SampleBatch sample_batch(std::span<const ScheduledSeq> seqs);

}  // namespace kiln
