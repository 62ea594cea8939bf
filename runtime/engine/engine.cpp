#include "runtime/engine/engine.hpp"

#include "runtime/core/error.hpp"
#include "runtime/serving/step_batch_builder.hpp"

namespace kiln {

namespace {

SchedulerConfig scheduler_config(const ModelDef& model, const EngineOptions& options) {
  const ModelInfo& m = model.info;
  SchedulerConfig c;
  c.max_num_seqs = options.max_batch > 0 ? options.max_batch : m.max_batch;
  c.max_batched_tokens = options.max_batched_tokens > 0 ? options.max_batched_tokens : m.max_batched_tokens;
  if (c.max_num_seqs > m.max_batch) fail("--max-batch ", c.max_num_seqs, " exceeds the model's build.max_batch (", m.max_batch, ")");
  if (c.max_batched_tokens > m.max_batched_tokens) {
    fail("max batched tokens ", c.max_batched_tokens, " exceeds the model's build.max_batched_tokens (", m.max_batched_tokens, ")");
  }
  c.max_context = m.max_context;
  c.vocab_size = m.vocab_size;
  c.eos_token_ids = m.eos_token_ids;
  c.validate();
  return c;
}

}  // namespace

Engine::Engine(const ModelDef& model, Backend& backend, const EngineOptions& options)
    : model_(model),
      backend_(backend),
      options_(options),
      scheduler_(scheduler_config(model, options), BlockManager(backend.kv_pages(), model.info.page_size)) {}

void Engine::add(Request request) {
  if (options_.capture_prompt_logits && scheduler_.has_unfinished()) {
    fail("prompt logits can be captured for one request at a time");
  }
  capture_prompt_len_ = static_cast<int32_t>(request.prompt.size());
  scheduler_.add(std::move(request));
}

std::vector<FinishedRequest> Engine::run(const std::function<void(const TokenEvent&)>& on_token) {
  std::vector<FinishedRequest> finished;
  run_until({}, on_token, [&](FinishedRequest&& f) { finished.push_back(std::move(f)); });
  return finished;
}

void Engine::run_until(const std::function<bool()>& stop, const std::function<void(const TokenEvent&)>& on_token,
                       const std::function<void(FinishedRequest&&)>& on_finished) {
  run_start_ = std::chrono::steady_clock::now();
  first_token_at_.clear();
  prompt_logits_.clear();
  while (scheduler_.has_unfinished() && !(stop && stop())) {
    run_step(on_token);
    for (FinishedRequest& f : scheduler_.take_finished()) {
      stats_.prompt_tokens += f.num_prompt_tokens;
      stats_.cached_prompt_tokens += f.num_cached_prompt_tokens;
      stats_.output_tokens += static_cast<int64_t>(f.output_tokens.size());
      auto it = first_token_at_.find(f.id);
      if (it != first_token_at_.end()) stats_.ttft_seconds.push_back(it->second);
      on_finished(std::move(f));
    }
  }
  stats_.wall_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start_).count();
  stats_.scheduler = scheduler_.stats();
}

void Engine::run_step(const std::function<void(const TokenEvent&)>& on_token) {
  const ScheduledStep step = scheduler_.schedule();
  if (step.empty()) fail("internal: the scheduler has unfinished requests but scheduled nothing");

  // Decodes and prefill chunks run as separate forwards: a decode token always takes the decode
  // graph (our GEMV kernels) and a prompt token the prefill graph, whatever else shares the step.
  // Each token's numerics then do not depend on the batch it ran in (outputs equal running alone),
  // at the price of reading the weights twice in mixed steps.
  std::vector<SampleOutput> samples;
  const std::span<const ScheduledSeq> seqs = step.seqs;
  if (step.num_decodes > 0 && step.num_decodes < static_cast<int32_t>(seqs.size())) {
    samples = run_forward(seqs.first(step.num_decodes));
    const std::vector<SampleOutput> prefill_samples = run_forward(seqs.subspan(step.num_decodes));
    samples.insert(samples.end(), prefill_samples.begin(), prefill_samples.end());
  } else {
    samples = run_forward(seqs);
  }
  ++stats_.steps;

  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start_).count();
  for (const TokenEvent& e : scheduler_.on_step_done(step, samples)) {
    first_token_at_.try_emplace(e.id, now);
    if (on_token) on_token(e);
  }
}

std::vector<SampleOutput> Engine::run_forward(std::span<const ScheduledSeq> seqs) {
  StepBatch batch = build_step_batch(seqs, model_.info.page_size);
  const std::vector<SamplerRow> rows = sampler_rows(seqs);

  // Capturing prompt logits: every row of the (single) sequence's prompt chunks yields logits; the
  // sampled row, if the chunk ends the prompt, is the last one.
  int32_t first_sample_row = 0;
  int32_t capture_rows = 0;
  if (options_.capture_prompt_logits) {
    if (seqs.size() != 1) fail("internal: capturing prompt logits with ", seqs.size(), " sequences in a step");
    const ScheduledSeq& seq = seqs.front();
    if (seq.start < capture_prompt_len_) {
      capture_rows = std::min(batch.num_tokens(), capture_prompt_len_ - seq.start);
      batch.logit_rows.resize(batch.num_tokens());
      for (int32_t i = 0; i < batch.num_tokens(); ++i) batch.logit_rows[i] = i;
      first_sample_row = batch.num_tokens() - static_cast<int32_t>(rows.size());
    }
  }

  const auto start = std::chrono::steady_clock::now();
  backend_.forward(batch);
  if (capture_rows > 0) {
    const size_t V = model_.info.vocab_size, old = prompt_logits_.size();
    prompt_logits_.resize(old + capture_rows * V);
    backend_.copy_logits(0, capture_rows, prompt_logits_.data() + old);
  }
  std::vector<SampleOutput> samples = backend_.sample(first_sample_row, rows);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (batch.decode_only()) {
    ++stats_.decode_steps;
    stats_.decode_seconds += seconds;
    const int64_t experts = backend_.last_step_experts_read();
    stats_.decode_experts_read += experts;
    stats_.decode_weight_bytes += model_.info.decode_weight_bytes + experts * model_.info.routed_expert_bytes;
    for (int32_t len : batch.context_len) stats_.decode_kv_bytes += len * backend_.info().kv_bytes_per_token;
  } else {
    ++stats_.prefill_steps;
    stats_.prefill_seconds += seconds;
  }
  return samples;
}

}  // namespace kiln
