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
  // As run(), but hands each request to on_finished as soon as it finishes (so results can be
  // written as they come), and stops early when `stop` returns true, which it is asked between
  // steps (an interrupted batch); the unfinished requests stay queued.
  void run_until(const std::function<bool()>& stop, const std::function<void(const TokenEvent&)>& on_token,
                 const std::function<void(FinishedRequest&&)>& on_finished);

  const EngineStats& stats() const { return stats_; }
  // With capture_prompt_logits: [prompt_len, vocab] logits of the last run's request.
  const std::vector<float>& prompt_logits() const { return prompt_logits_; }

 private:
  void run_step(const std::function<void(const TokenEvent&)>& on_token);
  // One forward of the backend over `seqs` (all decodes, or prefill chunks) and its samples.
  std::vector<SampleOutput> run_forward(std::span<const ScheduledSeq> seqs);

  const ModelDef& model_;
  Backend& backend_;
  EngineOptions options_;
  Scheduler scheduler_;
  EngineStats stats_;
  std::chrono::steady_clock::time_point run_start_;
  std::map<RequestId, double> first_token_at_;
  std::vector<float> prompt_logits_;
  int32_t capture_prompt_len_ = 0;
};

}  // namespace kiln
