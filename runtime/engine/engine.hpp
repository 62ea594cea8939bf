// The engine: continuous batching over one backend. Requests go in; each step the scheduler picks
// decodes and prefill chunks, the backend runs the forward and samples, and the scheduler takes
// the tokens. Everything is sized at start (the KV pool is the backend's).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "runtime/engine/backend.hpp"
#include "runtime/serving/scheduler.hpp"

namespace kiln {

struct EngineOptions {
  int32_t max_batch = 0;            // sequences per step (0: the model's build.max_batch)
  int32_t max_batched_tokens = 0;   // tokens per step (0: the model's build.max_batched_tokens)
  int32_t max_context = 0;          // prompt + generated tokens (0: the model's build.max_context)
  bool capture_prompt_logits = false;  // keep every prompt row's logits (one request at a time)
};

struct EngineStats {
  int64_t steps = 0, prefill_steps = 0, decode_steps = 0;
  int64_t prompt_tokens = 0;        // prompt tokens of finished requests
  int64_t cached_prompt_tokens = 0; // of which served from the prefix cache
  int64_t output_tokens = 0;
  double prefill_seconds = 0;       // steps that carried prompt tokens
  double decode_seconds = 0;        // steps of decodes only
  double wall_seconds = 0;
  std::vector<double> ttft_seconds; // per finished request: from run() start to its first token
  // What decode steps read: weights (bf16; routed experts counted as chosen) and KV cache.
  int64_t decode_weight_bytes = 0;
  int64_t decode_kv_bytes = 0;
  int64_t decode_experts_read = 0;  // (layer, expert) pairs, summed over decode steps
  SchedulerStats scheduler;
};

class Engine {
 public:
  Engine(const ModelDef& model, Backend& backend, const EngineOptions& options);

  // Queues a request; throws kiln::Error for that request only (too long, bad params, ...).
  void add(Request request);
  // Runs every queued request to completion, calling on_token for each sampled token in order.
  std::vector<FinishedRequest> run(const std::function<void(const TokenEvent&)>& on_token = {});

  // Live serving (runtime/server/engine_loop.hpp) drives the engine one step at a time, adding and
  // aborting requests between steps; run() is these in a loop.
  bool has_unfinished() const { return scheduler_.has_unfinished(); }
  void step(const std::function<void(const TokenEvent&)>& on_token = {});
  // Finishes an unfinished request now (see Scheduler::abort); its pages are free on return.
  bool abort(RequestId id, FinishReason reason);
  // Requests finished since the last call, counted into stats().
  std::vector<FinishedRequest> take_finished();
  const Scheduler& scheduler() const { return scheduler_; }

  const EngineStats& stats() const { return stats_; }
  // With capture_prompt_logits: [prompt_len, vocab] logits of the last run's request.
  const std::vector<float>& prompt_logits() const { return prompt_logits_; }

 private:
  // One forward of the backend over `seqs` (all decodes, or prefill chunks) and its samples.
  SampleResult run_forward(std::span<const ScheduledSeq> seqs);

  const ModelDef& model_;
  Backend& backend_;
  EngineOptions options_;
  Scheduler scheduler_;
  EngineStats stats_;
  std::chrono::steady_clock::time_point run_start_;
  bool started_ = false;  // run_start_ is set
  std::map<RequestId, double> first_token_at_;
  std::vector<float> prompt_logits_;
  // Prompt logprobs computed so far, per request, until they go out with its first token.
  std::map<RequestId, std::vector<PromptTokenLogprob>> prompt_logprobs_;
  int32_t capture_prompt_len_ = 0;
};

}  // namespace kiln
