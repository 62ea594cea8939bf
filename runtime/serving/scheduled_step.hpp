// What the scheduler decided for one step: a decode phase (one new token per sequence) and a
// prefill phase (prompt chunks), each run as its own forward, so that a token's numerics depend only
// on its phase, never on what else shares the step (outputs equal running alone).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/core/step_batch.hpp"
#include "runtime/serving/request_id.hpp"
#include "runtime/serving/sample_batch.hpp"
#include "runtime/serving/sampling_math.hpp"
#include "runtime/serving/token_constraint.hpp"

namespace kiln {

struct ScheduledSeq {
  RequestId id = 0;
  int32_t start = 0;                   // position of the first new token = tokens already in the KV cache
  std::vector<int32_t> new_tokens;     // tokens fed this step: 1 for a decode, a chunk for a prefill
  // The sequence's pages, covering at least start + new_tokens.size(): a view of the block
  // manager's table, valid until the scheduler is called again.
  std::span<const int32_t> block_table;
  bool samples = false;                // the step ends at the last known token: sample the next one
  SamplerRow sampler;                  // valid when samples
  bool prompt_logits = false;          // keep the logits of every row (a prompt chunk; the request asked)
  std::vector<LogitEdit> edits;        // when samples: logit_bias, min_tokens and penalties (sample_batch.hpp)
  // When samples under structured output: the sequence's constraint (valid until on_step_done) and
  // the tokens that end its text. sample_batch() asks it for its mask then, after the forward is
  // launched, so that the host's work overlaps the GPU's.
  TokenConstraintState* constraint = nullptr;
  std::vector<int32_t> end_tokens;
  const std::vector<TokenMaskWord>* allowed = nullptr;  // when samples: allowed_token_ids' mask (the sequence's)
  // Prompt logprobs (params.prompt_logprobs): the prompt tokens that rows 0, 1, ... of this chunk
  // predict (positions start + 1, ...; the sampling row, if any, is not among them), and the top-N.
  std::vector<int32_t> prompt_targets;
  int32_t prompt_top_logprobs = 0;

  int32_t context_len() const { return start + static_cast<int32_t>(new_tokens.size()); }
};

// The sequences of one phase, in batch order.
struct PhaseStep {
  StepPhase phase;
  std::vector<ScheduledSeq> seqs;
  int32_t num_tokens = 0;             // Σ new_tokens.size()

  bool empty() const { return seqs.empty(); }
  int32_t num_samples() const {
    int32_t n = 0;
    for (const ScheduledSeq& s : seqs) n += s.samples ? 1 : 0;
    return n;
  }
};

struct ScheduledStep {
  PhaseStep decode{StepPhase::decode};    // running sequences past their prompt, oldest first
  PhaseStep prefill{StepPhase::prefill};  // prefill continuations, then new prefills
  std::vector<RequestId> preempted;       // swapped out or sent back to the waiting queue this step
  // KV copies to run before the step's forwards, swap_out first: the device pages given up are
  // the ones this step's forwards may write, and swap_in's pages are read by them.
  std::vector<PageSwap> swap_out, swap_in;

  bool empty() const { return decode.empty() && prefill.empty() && swap_out.empty() && swap_in.empty(); }
  int32_t num_tokens() const { return decode.num_tokens + prefill.num_tokens; }
  int32_t num_samples() const { return decode.num_samples() + prefill.num_samples(); }
};

// The sampler rows and logit edits of a phase's sampling sequences, in batch order (= the order of
// the StepBatch's sampling logit rows), and structured output's masks of the constrained ones
// (vocab_size: the model's vocabulary, which they cover).
SampleBatch sample_batch(std::span<const ScheduledSeq> seqs, int32_t vocab_size);

}  // namespace kiln
