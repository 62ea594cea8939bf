#include "runtime/engine/engine.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"
#include "runtime/serving/step_batch_builder.hpp"

namespace kiln {

namespace {

SchedulerConfig scheduler_config(const ModelDef& model, const EngineOptions& options, int32_t swap_pages) {
  const ModelInfo& m = model.info;
  SchedulerConfig c;
  c.max_num_seqs = options.max_batch > 0 ? options.max_batch : m.max_batch;
  c.max_batched_tokens = options.max_batched_tokens > 0 ? options.max_batched_tokens : m.max_batched_tokens;
  if (c.max_num_seqs > m.max_batch) fail("--max-batch ", c.max_num_seqs, " exceeds the model's build.max_batch (", m.max_batch, ")");
  if (c.max_batched_tokens > m.max_batched_tokens) {
    fail("max batched tokens ", c.max_batched_tokens, " exceeds the model's build.max_batched_tokens (", m.max_batched_tokens, ")");
  }
  c.max_context = options.max_context > 0 ? options.max_context : m.max_context;
  if (c.max_context > m.max_context) fail("--max-model-len ", c.max_context, " exceeds the model's build.max_context (", m.max_context, ")");
  c.vocab_size = m.vocab_size;
  c.eos_token_ids = m.eos_token_ids;
  c.swap_pages = swap_pages;
  c.validate();
  return c;
}

}  // namespace

Engine::Engine(const ModelDef& model, Backend& backend, const EngineOptions& options)
    : model_(model),
      backend_(backend),
      options_(options),
      scheduler_(scheduler_config(model, options, backend.swap_pages()),
                 BlockManager(backend.kv_pages(), model.info.page_size)) {}

void Engine::add(Request request) { scheduler_.add(std::move(request)); }

std::vector<FinishedRequest> Engine::run(const std::function<void(const TokenEvent&)>& on_token) {
  run_start_ = std::chrono::steady_clock::now();
  started_ = true;
  wall_before_ = stats_.wall_seconds;
  while (scheduler_.has_unfinished()) step(on_token);
  return take_finished();
}

bool Engine::abort(RequestId id, FinishReason reason) { return scheduler_.abort(id, reason); }

std::vector<FinishedRequest> Engine::take_finished() {
  std::vector<FinishedRequest> finished = scheduler_.take_finished();
  for (FinishedRequest& f : finished) {
    prompt_logprobs_.erase(f.id);  // aborted before its first token
    stats_.prompt_tokens += f.num_prompt_tokens;
    stats_.cached_prompt_tokens += f.num_cached_prompt_tokens;
    stats_.output_tokens += static_cast<int64_t>(f.output_tokens.size());
    if (auto it = first_token_at_.find(f.id); it != first_token_at_.end()) {
      f.first_token_seconds = it->second;
      stats_.ttft_seconds.push_back(it->second);
      first_token_at_.erase(it);
    }
    if (auto it = finished_at_.find(f.id); it != finished_at_.end()) {
      f.finish_seconds = it->second;
      finished_at_.erase(it);
    }
    if (auto it = prompt_logits_.find(f.id); it != prompt_logits_.end()) {
      f.prompt_logits = std::move(it->second);
      prompt_logits_.erase(it);
    }
  }
  stats_.scheduler = scheduler_.stats();
  return finished;
}

void Engine::step(const std::function<void(const TokenEvent&)>& on_token) {
  if (!started_) {
    run_start_ = std::chrono::steady_clock::now();
    started_ = true;
    wall_before_ = stats_.wall_seconds;
  }
  update_prefill_cap();
  const ScheduledStep step = scheduler_.schedule();
  if (step.empty()) fail("internal: the scheduler has unfinished requests but scheduled nothing");
  // Preempted sequences' KV to host memory, then swapped-in sequences' back, before the forwards
  // that reuse the pages given up and read the ones brought back.
  backend_.swap_kv(step.swap_out, true);
  backend_.swap_kv(step.swap_in, false);

  // The decode phase first: its samples come first (Scheduler::on_step_done).
  std::vector<SampleOutput> samples;
  std::vector<std::vector<TokenLogprob>> top;  // per sample, when its request asked for top-N
  for (const PhaseStep* phase : {&step.decode, &step.prefill}) {
    if (phase->empty()) continue;
    const auto phase_start = std::chrono::steady_clock::now();
    const SampleResult result = run_phase(*phase);
    measure_phase(*phase, std::chrono::duration<double>(std::chrono::steady_clock::now() - phase_start).count());
    size_t r = 0;
    for (const ScheduledSeq& s : phase->seqs) {
      if (!s.samples) continue;
      samples.push_back(result.outputs[r]);
      const auto row_top = result.row_top(r, s.sampler.top_logprobs);
      top.emplace_back(row_top.begin(), row_top.end());
      ++r;
    }
  }
  ++stats_.steps;

  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start_).count();
  stats_.wall_seconds = wall_before_ + now;  // the CLI and the server drive step() themselves
  std::vector<TokenEvent> events = scheduler_.on_step_done(step, samples);
  for (size_t i = 0; i < events.size(); ++i) {  // one event per sample, in step order
    TokenEvent& e = events[i];
    if (e.token >= 0) e.top_logprobs = std::move(top[i]);
    if (auto it = prompt_logprobs_.find(e.id); it != prompt_logprobs_.end()) {
      e.prompt_logprobs = std::move(it->second);
      prompt_logprobs_.erase(it);
    }
    first_token_at_.try_emplace(e.id, now);
    if (e.token >= 0) {
      const auto [last, first] = last_token_at_.try_emplace(e.id, now);
      if (!first) stats_.itl.add(now - last->second);
      last->second = now;
    }
    if (e.finished) {
      finished_at_[e.id] = now;
      last_token_at_.erase(e.id);
    }
    if (on_token) on_token(e);
  }
}

namespace {

constexpr int32_t kMinPrefillChunk = 16;  // what a step that decodes may always carry of a prompt
constexpr double kAverageWeight = 0.2;    // of the newest measurement in the moving averages

double moving_average(double average, double value) {
  return average > 0 ? (1 - kAverageWeight) * average + kAverageWeight * value : value;
}

}  // namespace

// A step with decodes and a prompt chunk of c tokens takes about t_decode + c / rate; at most
// max_decode_slowdown × t_decode when c <= (max_decode_slowdown - 1) · t_decode · rate. The rate is
// measured on the chunks this cap lets through, fixed costs included, so the cap settles where a
// chunk's time is the budget (or at kMinPrefillChunk when the fixed costs alone exceed it).
void Engine::update_prefill_cap() {
  if (options_.max_decode_slowdown <= 1 || decode_phase_seconds_ <= 0 || prefill_tokens_per_second_ <= 0) return;
  const double tokens = (options_.max_decode_slowdown - 1) * decode_phase_seconds_ * prefill_tokens_per_second_;
  scheduler_.set_prefill_cap(static_cast<int32_t>(std::clamp(tokens, double{kMinPrefillChunk}, 1e9)));
}

void Engine::measure_phase(const PhaseStep& phase, double seconds) {
  if (seconds <= 0) return;
  if (phase.phase == StepPhase::decode) {
    decode_phase_seconds_ = moving_average(decode_phase_seconds_, seconds);
  } else if (phase.num_tokens >= kMinPrefillChunk) {
    prefill_tokens_per_second_ = moving_average(prefill_tokens_per_second_, phase.num_tokens / seconds);
  }
}

SampleResult Engine::run_phase(const PhaseStep& phase) {
  const StepBatch batch = build_step_batch(phase, model_.info.page_size, backend_.step_buffer(phase.phase));

  const auto start = std::chrono::steady_clock::now();
  backend_.forward(batch);
  keep_prompt_logits(phase);
  keep_prompt_logprobs(phase);
  SampleResult samples = backend_.sample(sample_batch(phase.seqs, model_.info.vocab_size));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (phase.phase == StepPhase::decode) {
    ++stats_.decode_steps;
    stats_.decode_seconds += seconds;
    const ModelInfo& m = model_.info;
    const BackendInfo& info = backend_.info();
    const int64_t weight_bytes = info.decode_weight_bytes > 0 ? info.decode_weight_bytes : m.decode_weight_bytes;
    stats_.decode_weight_bytes += weight_bytes;
    int64_t expert_bytes = 0, kv_bytes = 0;
    if (const uint8_t* usage = info.expert_usage; usage != nullptr) {
      const int64_t experts = std::count(usage, usage + static_cast<int64_t>(m.num_layers) * m.num_routed_experts, 1);
      stats_.experts_counted = true;
      stats_.decode_experts_read += experts;
      expert_bytes = experts * m.routed_expert_bytes;
      stats_.decode_weight_bytes += expert_bytes;
    }
    for (int32_t len : batch.context_len) kv_bytes += len * info.kv_bytes_per_token;
    stats_.decode_kv_bytes += kv_bytes;
    const int64_t rank_weights = info.ranks > 1 ? info.rank_decode_weight_bytes : weight_bytes;
    stats_.decode_gpu_bytes += rank_weights + (expert_bytes + kv_bytes) / info.ranks;
  } else {
    ++stats_.prefill_steps;
    stats_.prefill_seconds += seconds;
  }
  return samples;
}

void Engine::keep_prompt_logits(const PhaseStep& phase) {
  const size_t V = model_.info.vocab_size;
  for (const PromptLogitRows& r : prompt_logit_rows(phase)) {
    std::vector<float>& kept = prompt_logits_[r.id];
    const int32_t have = static_cast<int32_t>(kept.size() / V);
    if (r.start > have) fail("internal: prompt logits of request ", r.id, " skip positions ", have, "..", r.start);
    const int32_t skip = have - r.start;  // positions computed again after a preemption
    if (skip >= r.count) continue;
    kept.resize(kept.size() + (r.count - skip) * V);
    backend_.copy_logits(r.first_row + skip, r.count - skip, kept.data() + have * V);
  }
}

void Engine::keep_prompt_logprobs(const PhaseStep& phase) {
  const std::vector<PromptLogitRows> rows = prompt_target_rows(phase);
  size_t next = 0;
  for (const ScheduledSeq& s : phase.seqs) {
    if (s.prompt_targets.empty()) continue;
    const PromptLogitRows& r = rows.at(next++);
    const SampleResult lp = backend_.logprobs(r.first_row, s.prompt_targets, s.prompt_top_logprobs);
    std::vector<PromptTokenLogprob>& acc = prompt_logprobs_[s.id];
    if (s.start == 0) acc.clear();  // recomputed after a preemption
    for (size_t k = 0; k < s.prompt_targets.size(); ++k) {
      const auto row_top = lp.row_top(k, s.prompt_top_logprobs);
      acc.push_back(PromptTokenLogprob{s.prompt_targets[k], lp.outputs[k].logprob, {row_top.begin(), row_top.end()}});
    }
  }
}

}  // namespace kiln
