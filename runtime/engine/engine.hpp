// The engine: continuous batching over one backend. Requests go in; each step the scheduler picks
// decodes and prefill chunks, the backend runs the forward and samples, and the scheduler takes
// the tokens. Everything is sized at start (the KV pool is the backend's).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "runtime/core/latency_histogram.hpp"
#include "runtime/engine/backend.hpp"
#include "runtime/serving/scheduler.hpp"

namespace kiln {

struct EngineOptions {
  int32_t max_batch = 0;            // sequences per step (0: the model's build.max_batch)
  int32_t max_batched_tokens = 0;   // tokens per step (0: the model's build.max_batched_tokens)
  int32_t max_context = 0;          // prompt + generated tokens (0: the model's build.max_context)
  // --max-decode-slowdown: with requests decoding, a step's prompt chunk is sized so that the step
  // takes at most this many times a decode-only step, from the step times measured as the run goes
  // (the scheduler's prefill cap); 0 or 1 and below: chunks fill the token budget.
  double max_decode_slowdown = 0;
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
  LatencyHistogram itl;             // between a request's consecutive tokens (the step that made each)
  // What decode steps read: weights (bf16; routed experts counted as chosen, with --profile) and
  // KV cache.
  int64_t decode_weight_bytes = 0;
  int64_t decode_kv_bytes = 0;
  int64_t decode_experts_read = 0;  // (layer, expert) pairs, summed over decode steps (--profile)
  bool experts_counted = false;     // the backend counted them (a MoE model under --profile)
  // Tensor parallelism: what one GPU reads (its weights' shards and whole copies, 1/ranks of the
  // chosen experts and of the KV cache bytes all ranks read); the same as the sum with one GPU.
  int64_t decode_gpu_bytes = 0;
  SchedulerStats scheduler;
};

class Engine {
 public:
  Engine(const ModelDef& model, Backend& backend, const EngineOptions& options);

  // Queues a request; throws kiln::Error for that request only (too long, bad params, ...).
  void add(Request request);
  // Runs every queued request to completion, calling on_token for each sampled token in order.
  // Requests that asked for prompt logits get them in FinishedRequest::prompt_logits.
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

 private:
  // The scheduler's prefill cap from the measured step times (EngineOptions::max_decode_slowdown).
  void update_prefill_cap();
  void measure_phase(const PhaseStep& phase, double seconds);
  // One forward of the backend over one phase of the step, and its samples.
  SampleResult run_phase(const PhaseStep& phase);
  // Appends the prompt positions a phase computed to their requests' prompt logits.
  void keep_prompt_logits(const PhaseStep& phase);
  // Computes the prompt logprobs a phase's rows predict, for the requests that asked.
  void keep_prompt_logprobs(const PhaseStep& phase);

  const ModelDef& model_;
  Backend& backend_;
  EngineOptions options_;
  Scheduler scheduler_;
  EngineStats stats_;
  std::chrono::steady_clock::time_point run_start_;
  bool started_ = false;  // run_start_ is set
  double wall_before_ = 0;  // stats_.wall_seconds of earlier run() calls
  // The prefill cap's measurements (max_decode_slowdown): a decode phase's seconds and prefill
  // tokens per second, each a moving average (0 until measured).
  double decode_phase_seconds_ = 0, prefill_tokens_per_second_ = 0;
  std::map<RequestId, double> last_token_at_;  // for the inter-token latencies
  std::map<RequestId, double> first_token_at_, finished_at_;
  std::map<RequestId, std::vector<float>> prompt_logits_;  // [positions so far, vocab]
  // Prompt logprobs computed so far, per request, until they go out with its first token.
  std::map<RequestId, std::vector<PromptTokenLogprob>> prompt_logprobs_;
};

}  // namespace kiln
