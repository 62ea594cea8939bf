// Continuous-batching scheduler with chunked prefill and recompute preemption (vLLM v1's Scheduler,
// nano-vllm's scheduler.py). Model-independent: it hands out ScheduledSteps (a decode phase and a
// prefill phase) and takes back sampled tokens; build_step_batch turns a phase into the forward's
// StepBatch.
//
// Each schedule():
//   1. Decodes of running sequences, oldest first, one token each. A decode that needs a page when
//      none is free or evictable preempts the NEWEST running sequence (its pages are released and
//      it returns to the front of the waiting queue, to recompute prompt + generated tokens later),
//      and retries; if the decoding sequence is itself the newest, it is the one preempted.
//      A re-admitted sequence recomputes its generated tokens here too, one per step without
//      sampling (a replay): their KV is then computed exactly as the first time, by the decode
//      graph, so preemption never changes a request's output.
//   2. Running sequences still prefilling their prompt continue, oldest first, as far as the token
//      budget goes (prefill covers prompts only; generated tokens replay as decodes).
//   3. Unless step 1 preempted anything, waiting sequences are admitted first come, first served
//      while the budget, max_num_seqs and the KV pool allow: all their known tokens get slots at
//      admission (leading full pages from the prefix cache), and their first chunk is scheduled.
//      The head of the queue is never skipped, so a long prompt cannot starve.
// Every scheduled step must be followed by on_step_done() before the next schedule().
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/serving/block_manager.hpp"
#include "runtime/serving/scheduled_step.hpp"
#include "runtime/serving/sequence.hpp"

namespace kiln {

struct SchedulerConfig {
  int32_t max_num_seqs = 256;          // running sequences at most
  int32_t max_batched_tokens = 8192;   // tokens per step at most; >= max_num_seqs (decodes always fit)
  int32_t max_context = 0;             // the model's max positions (prompt + generated)
  int32_t vocab_size = 0;              // token ids must lie in [0, vocab_size)
  std::vector<int32_t> eos_token_ids;  // the model's EOS tokens (several for Llama 3 instruct)
  // Pages of host memory a preempted sequence's KV can be swapped out to (the backend's swap
  // space); 0: preempted sequences recompute their KV when admitted again.
  int32_t swap_pages = 0;
  // The most prompt tokens a step that also decodes may carry (0: max_batched_tokens), so that a
  // long prompt arriving slows the running requests' tokens by a bounded amount; the engine sets
  // it as it measures (set_prefill_cap).
  int32_t prefill_cap = 0;

  void validate() const;
};

// One generated token, for streaming.
struct TokenEvent {
  RequestId id = 0;
  int32_t token = -1;          // -1 when the sequence finished on BadLogits
  float logprob = 0.0f;        // when the request asked for logprobs
  std::vector<TokenLogprob> top_logprobs;  // the params.top_logprobs most likely tokens, when asked
  // With the request's first token, when it asked for prompt_logprobs: prompt tokens 1.. (the
  // first has no context to be predicted from).
  std::vector<PromptTokenLogprob> prompt_logprobs;
  bool finished = false;
  FinishReason reason = FinishReason::None;
};

struct FinishedRequest {
  RequestId id = 0;
  std::vector<int32_t> output_tokens;  // generated tokens, EOS / stop token included
  std::vector<float> logprobs;         // one per output token when asked for
  FinishReason reason = FinishReason::None;
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_prompt_tokens = 0;
  int32_t num_preemptions = 0;
  std::vector<float> prompt_logits;    // [prompt, vocab] when Request::prompt_logits (the engine's)
  // Seconds from the start of the engine's run() to this request's first token and to its last
  // (the engine's).
  double first_token_seconds = 0, finish_seconds = 0;
};

struct SchedulerStats {
  int64_t steps = 0;
  int64_t prefill_tokens = 0;  // prompt (and recomputed) tokens fed, prefix-cache hits excluded
  int64_t decode_tokens = 0;
  int64_t preemptions = 0;
  int64_t swapped_out = 0;     // preemptions that swapped the KV to host memory (the rest recompute)
  int64_t swap_out_pages = 0;
  int64_t swap_in_pages = 0;
  int64_t finished = 0;
  int64_t rejected = 0;        // add() calls refused
  BlockManagerStats kv;
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, BlockManager blocks);

  // Queues a request. Throws kiln::Error naming the request when it cannot ever be served (bad
  // parameters, empty or too long prompt, token ids outside the vocabulary, more pages than the
  // whole pool, duplicate id); the scheduler is left unchanged.
  void add(Request request);

  ScheduledStep schedule();

  // After the forwards and the sampler: one SampleOutput per sampling sequence of `step`, the
  // decode phase's first, each phase in its batch order. Returns the generated tokens.
  std::vector<TokenEvent> on_step_done(const ScheduledStep& step, std::span<const SampleOutput> samples);

  // Finishes an unfinished request at once with `reason` (StopString or Aborted), waiting or
  // running: its pages go back to the pool now. Returns false when `id` is not unfinished. Only
  // between steps (not between schedule() and on_step_done()).
  bool abort(RequestId id, FinishReason reason);

  // Requests finished since the last call, in finishing order.
  std::vector<FinishedRequest> take_finished();

  bool has_unfinished() const { return !waiting_.empty() || !running_.empty() || !swapped_.empty(); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  // The longest a sequence may grow: the model's max context or the whole KV pool, if smaller.
  int32_t context_limit() const { return context_limit_; }
  const BlockManager& blocks() const { return blocks_; }
  const SchedulerConfig& config() const { return config_; }
  // SchedulerConfig::prefill_cap, from the next schedule() on (at least 1 token; 0: none).
  void set_prefill_cap(int32_t tokens);
  SchedulerStats stats() const;

 private:
  ScheduledSeq make_scheduled(const Sequence& seq, int32_t num_new_tokens) const;
  // The tokens that end a request's text (the model's EOS, its stop_token_ids): what structured
  // output lets through only where the text may end.
  std::vector<int32_t> end_tokens(const SamplingParams& params) const;
  void preempt(Sequence& seq, ScheduledStep& step);
  // Brings the oldest swapped-out sequence back (its KV copied in), scheduling its next tokens;
  // false when the pool cannot hold it now.
  bool swap_in(ScheduledStep& step, int32_t& budget);
  void insert_running(Sequence* seq);
  // Appends the sampled token and finishes the sequence when it should stop.
  TokenEvent apply_sample(Sequence& seq, const SampleOutput& sample);
  void finish(Sequence& seq, FinishReason reason);

  SchedulerConfig config_;
  BlockManager blocks_;
  int32_t context_limit_;
  std::unordered_map<RequestId, std::unique_ptr<Sequence>> seqs_;  // unfinished sequences
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // sorted by arrival: the back is the newest
  std::vector<Sequence*> swapped_;  // sorted by arrival: swapped back in oldest first
  std::vector<int32_t> free_host_pages_;
  std::vector<FinishedRequest> finished_;
  uint64_t next_arrival_ = 0;
  bool step_pending_ = false;
  SchedulerStats stats_;
};

}  // namespace kiln
