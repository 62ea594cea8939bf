#include "runtime/serving/scheduler.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"

namespace kiln {

void SchedulerConfig::validate() const {
  if (max_num_seqs <= 0) fail("scheduler: max_num_seqs = ", max_num_seqs, ": expected > 0");
  if (max_batched_tokens < max_num_seqs) {
    fail("scheduler: max_batched_tokens = ", max_batched_tokens, ": expected >= max_num_seqs (",
         max_num_seqs, ") so every running sequence's decode fits in a step");
  }
  if (max_context <= 0) fail("scheduler: max_context = ", max_context, ": expected > 0");
  if (vocab_size <= 0) fail("scheduler: vocab_size = ", vocab_size, ": expected > 0");
  if (swap_pages < 0) fail("scheduler: swap_pages = ", swap_pages, ": expected >= 0");
  if (prefill_cap < 0) fail("scheduler: prefill_cap = ", prefill_cap, ": expected >= 0");
  for (int32_t eos : eos_token_ids) {
    if (eos < 0 || eos >= vocab_size) {
      fail("scheduler: EOS token ", eos, " is outside the vocabulary [0, ", vocab_size, ")");
    }
  }
}

Scheduler::Scheduler(SchedulerConfig config, BlockManager blocks)
    : config_(std::move(config)), blocks_(std::move(blocks)) {
  config_.validate();
  const int64_t pool_tokens = static_cast<int64_t>(blocks_.num_pages()) * blocks_.page_size();
  context_limit_ = static_cast<int32_t>(std::min<int64_t>(config_.max_context, pool_tokens));
  for (int32_t p = config_.swap_pages - 1; p >= 0; --p) free_host_pages_.push_back(p);
}

void Scheduler::add(Request request) {
  try {
    request.params.validate();
    if (seqs_.count(request.id)) fail("the id is already in use by an unfinished request");
    const auto& prompt = request.prompt;
    if (prompt.empty()) fail("the prompt is empty");
    for (size_t i = 0; i < prompt.size(); ++i) {
      if (prompt[i] < 0 || prompt[i] >= config_.vocab_size) {
        fail("prompt token ", i, " = ", prompt[i], " is outside the vocabulary [0, ", config_.vocab_size, ")");
      }
    }
    for (int32_t stop : request.params.stop_token_ids) {
      if (stop >= config_.vocab_size) {
        fail("stop token ", stop, " is outside the vocabulary [0, ", config_.vocab_size, ")");
      }
    }
    for (const auto& [token, bias] : request.params.logit_bias) {
      if (token >= config_.vocab_size) {
        fail("logit_bias token ", token, " is outside the vocabulary [0, ", config_.vocab_size, ")");
      }
    }
    for (int32_t token : request.params.allowed_token_ids) {
      if (token >= config_.vocab_size) {
        fail("allowed token ", token, " is outside the vocabulary [0, ", config_.vocab_size, ")");
      }
    }
    for (const std::vector<int32_t>& word : request.params.bad_words_ids) {
      for (int32_t token : word) {
        if (token >= config_.vocab_size) {
          fail("bad word token ", token, " is outside the vocabulary [0, ", config_.vocab_size, ")");
        }
      }
    }
    if (static_cast<int64_t>(prompt.size()) > config_.max_context) {
      fail("the prompt has ", prompt.size(), " tokens; the model's max context is ", config_.max_context);
    }
    if (blocks_.pages_for(static_cast<int64_t>(prompt.size())) > blocks_.num_pages()) {
      fail("the prompt has ", prompt.size(), " tokens and needs ", blocks_.pages_for(prompt.size()),
           " KV pages; the whole pool has ", blocks_.num_pages(), " pages of ", blocks_.page_size(), " tokens");
    }
  } catch (const Error& e) {
    ++stats_.rejected;
    fail("request ", request.id, " rejected: ", e.what());
  }

  auto seq = std::make_unique<Sequence>();
  seq->id = request.id;
  seq->arrival = next_arrival_++;
  seq->num_prompt_tokens = static_cast<int32_t>(request.prompt.size());
  seq->tokens = std::move(request.prompt);
  seq->seed = request.params.seed ? *request.params.seed : draw_request_seed();
  seq->params = std::move(request.params);
  seq->prompt_logits = request.prompt_logits;
  if (seq->params.constraint) seq->constraint = seq->params.constraint->start();
  if (!seq->params.allowed_token_ids.empty()) {
    seq->allowed_mask.assign(static_cast<size_t>(token_mask_words(config_.vocab_size)), 0);
    for (int32_t t : seq->params.allowed_token_ids) seq->allowed_mask[t / 64] |= TokenMaskWord{1} << (t % 64);
  }
  if (seq->params.repetition_penalty != 1.0f) {
    seq->prompt_set = seq->tokens;
    std::sort(seq->prompt_set.begin(), seq->prompt_set.end());
    seq->prompt_set.erase(std::unique(seq->prompt_set.begin(), seq->prompt_set.end()), seq->prompt_set.end());
  }
  waiting_.push_back(seq.get());
  seqs_.emplace(seq->id, std::move(seq));
}

std::vector<int32_t> Scheduler::end_tokens(const SamplingParams& params) const {
  std::vector<int32_t> ends = params.stop_token_ids;
  ends.insert(ends.end(), config_.eos_token_ids.begin(), config_.eos_token_ids.end());
  return ends;
}

ScheduledSeq Scheduler::make_scheduled(const Sequence& seq, int32_t num_new_tokens) const {
  ScheduledSeq s;
  s.id = seq.id;
  s.start = seq.num_computed;
  s.new_tokens.assign(seq.tokens.begin() + seq.num_computed,
                      seq.tokens.begin() + seq.num_computed + num_new_tokens);
  s.block_table = blocks_.block_table(seq.id);
  s.samples = seq.num_computed + num_new_tokens == seq.num_tokens();
  s.prompt_logits = seq.prompt_logits && seq.num_computed < seq.num_prompt_tokens;
  // (Not again when a preempted sequence recomputes its prompt: its client has them already.)
  if (seq.params.prompt_logprobs && seq.num_generated() == 0 && seq.num_computed < seq.num_prompt_tokens - 1) {
    const int32_t last = std::min(seq.num_computed + num_new_tokens, seq.num_prompt_tokens - 1);
    s.prompt_targets.assign(seq.tokens.begin() + seq.num_computed + 1, seq.tokens.begin() + last + 1);
    s.prompt_top_logprobs = *seq.params.prompt_logprobs;
  }
  if (s.samples) {
    s.sampler = make_sampler_row(seq.params, seq.seed, static_cast<uint64_t>(seq.num_generated()));
    const SamplingParams& p = seq.params;
    if (p.has_penalties() || !p.logit_bias.empty() || seq.num_generated() < p.min_tokens || !p.bad_words_ids.empty()) {
      std::vector<int32_t> stop_ids = p.stop_token_ids;
      if (!p.ignore_eos) stop_ids.insert(stop_ids.end(), config_.eos_token_ids.begin(), config_.eos_token_ids.end());
      const std::span<const int32_t> output(seq.tokens.data() + seq.num_prompt_tokens,
                                            static_cast<size_t>(seq.num_generated()));
      s.edits = make_logit_edits(p, seq.output_counts, seq.prompt_set, seq.num_generated(), stop_ids,
                                 bad_word_bans(p.bad_words_ids, output));
    }
    if (!seq.allowed_mask.empty()) s.allowed = &seq.allowed_mask;
    if (seq.constraint) {  // its mask comes in sample_batch(), after the forward is launched
      s.constraint = seq.constraint.get();
      s.end_tokens = end_tokens(p);
    }
  }
  return s;
}

ScheduledStep Scheduler::schedule() {
  if (step_pending_) fail("scheduler: schedule() called before on_step_done() for the previous step");
  ScheduledStep step;
  int32_t budget = config_.max_batched_tokens;

  // 1. Decodes, oldest first; preempt the newest running sequence when a page is missing. A
  //    sequence past its prompt takes one token per step: its next sample, or (after a
  //    preemption) the replay of a token it had generated, so that every generated token's KV is
  //    computed the same way as in an uninterrupted run (bit-identical outputs).
  for (size_t i = 0; i < running_.size();) {
    Sequence& seq = *running_[i];
    if (seq.num_computed < seq.num_prompt_tokens || seq.num_uncomputed() < 1) {
      ++i;
      continue;
    }
    const int32_t needed = seq.num_tokens() - blocks_.num_slots(seq.id);
    bool self_preempted = false;
    while (!blocks_.can_append_slots(seq.id, needed)) {
      Sequence* victim = running_.back();
      running_.pop_back();
      preempt(*victim, step);
      if (victim == &seq) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // it was the newest: nothing after it is left
    blocks_.append_slots(seq.id, needed);
    step.decode.seqs.push_back(make_scheduled(seq, 1));
    --budget;
    ++i;
  }

  // With decodes in this step, its prompt tokens are capped (the decodes wait for them).
  if (!step.decode.seqs.empty() && config_.prefill_cap > 0) budget = std::min(budget, config_.prefill_cap);

  // 2. Prefills in progress continue, oldest first. Prefill covers the prompt only; generated
  //    tokens are replayed as decodes (above).
  for (Sequence* seq : running_) {
    if (budget == 0) break;
    if (seq->num_computed >= seq->num_prompt_tokens) continue;
    const int32_t chunk = std::min(seq->num_prompt_tokens - seq->num_computed, budget);
    step.prefill.seqs.push_back(make_scheduled(*seq, chunk));
    budget -= chunk;
  }

  // 3. Swapped-out sequences come back first, oldest first, then admissions, first come first
  //    served; neither in a step that had to preempt.
  while (step.preempted.empty() && budget > 0 && !swapped_.empty() &&
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs && swap_in(step, budget)) {
  }
  while (step.preempted.empty() && swapped_.empty() && budget > 0 && !waiting_.empty() &&
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs) {
    Sequence& seq = *waiting_.front();
    // Prompt logits and prompt logprobs need every prompt row computed: no prefix-cache hits.
    const bool use_cache = !seq.prompt_logits && !seq.params.prompt_logprobs;
    if (!blocks_.can_allocate(seq.tokens, use_cache)) break;
    const int32_t cached = blocks_.allocate(seq.id, seq.tokens, use_cache);
    seq.num_computed = cached;
    if (!seq.admitted_before) {
      seq.num_cached_prompt_tokens = cached;
      seq.admitted_before = true;
    }
    seq.status = SequenceStatus::Running;
    waiting_.pop_front();
    insert_running(&seq);
    // Prefix-cache hits may cover the whole prompt (or more) of a re-admitted sequence: its
    // generated tokens replay as decodes, the first in this step (its slots are all allocated;
    // a step that admits only this sequence must not come out empty).
    if (seq.num_computed >= seq.num_prompt_tokens) {
      step.decode.seqs.push_back(make_scheduled(seq, 1));
      --budget;
      continue;
    }
    const int32_t chunk = std::min(seq.num_prompt_tokens - seq.num_computed, budget);
    step.prefill.seqs.push_back(make_scheduled(seq, chunk));
    budget -= chunk;
  }

  for (PhaseStep* phase : {&step.decode, &step.prefill}) {
    for (const ScheduledSeq& s : phase->seqs) phase->num_tokens += static_cast<int32_t>(s.new_tokens.size());
  }
  if (!step.empty()) {
    step_pending_ = true;
    ++stats_.steps;
    stats_.decode_tokens += step.decode.num_tokens;
    stats_.prefill_tokens += step.prefill.num_tokens;
  }
  return step;
}

std::vector<TokenEvent> Scheduler::on_step_done(const ScheduledStep& step, std::span<const SampleOutput> samples) {
  if (step.empty()) return {};
  if (!step_pending_) fail("scheduler: on_step_done() without a scheduled step");
  if (static_cast<int32_t>(samples.size()) != step.num_samples()) {
    fail("scheduler: the step has ", step.num_samples(), " sampling sequences but ", samples.size(),
         " samples came back");
  }
  step_pending_ = false;
  std::vector<TokenEvent> events;
  size_t next_sample = 0;
  for (const PhaseStep* phase : {&step.decode, &step.prefill}) {
    for (const ScheduledSeq& s : phase->seqs) {
      auto it = seqs_.find(s.id);
      if (it == seqs_.end() || it->second->status != SequenceStatus::Running || it->second->num_computed != s.start) {
        fail("scheduler: step entry for sequence ", s.id, " does not match a running sequence at position ", s.start);
      }
      Sequence& seq = *it->second;
      seq.num_computed += static_cast<int32_t>(s.new_tokens.size());
      blocks_.mark_computed(seq.id, std::span<const int32_t>(seq.tokens).first(seq.num_computed));
      if (s.samples) events.push_back(apply_sample(seq, samples[next_sample++]));
    }
  }
  return events;
}

TokenEvent Scheduler::apply_sample(Sequence& seq, const SampleOutput& sample) {
  TokenEvent event;
  event.id = seq.id;
  if (sample.status != kSampleOk) {
    finish(seq, FinishReason::BadLogits);
    event.finished = true;
    event.reason = FinishReason::BadLogits;
    return event;
  }
  if (sample.token < 0 || sample.token >= config_.vocab_size) {
    fail("scheduler: sampled token ", sample.token, " for sequence ", seq.id, " is outside the vocabulary [0, ",
         config_.vocab_size, ")");
  }
  seq.tokens.push_back(sample.token);
  if (seq.params.logprobs) seq.logprobs.push_back(sample.logprob);
  if (seq.constraint) {
    const std::vector<int32_t> ends = end_tokens(seq.params);
    if (std::find(ends.begin(), ends.end(), sample.token) == ends.end()) seq.constraint->accept(sample.token);
  }
  if (seq.params.has_penalties()) {
    auto& counts = seq.output_counts;
    const auto at = std::lower_bound(counts.begin(), counts.end(), std::pair{sample.token, 0});
    if (at != counts.end() && at->first == sample.token) {
      ++at->second;
    } else {
      counts.insert(at, {sample.token, 1});
    }
  }
  event.token = sample.token;
  event.logprob = sample.logprob;

  const auto contains = [](const std::vector<int32_t>& ids, int32_t t) {
    return std::find(ids.begin(), ids.end(), t) != ids.end();
  };
  FinishReason reason = FinishReason::None;
  if (!seq.params.ignore_eos && contains(config_.eos_token_ids, sample.token)) {
    reason = FinishReason::Eos;
  } else if (contains(seq.params.stop_token_ids, sample.token)) {
    reason = FinishReason::StopToken;
  } else if (seq.num_generated() >= seq.params.max_tokens) {
    reason = FinishReason::MaxTokens;
  } else if (seq.num_tokens() >= context_limit_) {
    // The pool, not the model, may be the limit: say which, so the caller can raise --kv-pages.
    reason = seq.num_tokens() >= config_.max_context ? FinishReason::MaxContext : FinishReason::KvPoolFull;
  }
  if (reason != FinishReason::None) {
    finish(seq, reason);
    event.finished = true;
    event.reason = reason;
  }
  return event;
}

bool Scheduler::abort(RequestId id, FinishReason reason) {
  if (step_pending_) fail("scheduler: abort() between schedule() and on_step_done()");
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return false;
  finish(*it->second, reason);
  return true;
}

void Scheduler::finish(Sequence& seq, FinishReason reason) {
  const RequestId id = seq.id;
  if (blocks_.has_sequence(id)) blocks_.free(id);
  if (seq.status == SequenceStatus::Waiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), &seq));
  } else if (seq.status == SequenceStatus::Swapped) {
    swapped_.erase(std::find(swapped_.begin(), swapped_.end(), &seq));
    free_host_pages_.insert(free_host_pages_.end(), seq.host_pages.begin(), seq.host_pages.end());
    seq.host_pages.clear();
  } else {
    running_.erase(std::find(running_.begin(), running_.end(), &seq));
  }
  FinishedRequest done;
  done.id = seq.id;
  done.output_tokens.assign(seq.tokens.begin() + seq.num_prompt_tokens, seq.tokens.end());
  done.logprobs = std::move(seq.logprobs);
  done.reason = reason;
  done.num_prompt_tokens = seq.num_prompt_tokens;
  done.num_cached_prompt_tokens = seq.num_cached_prompt_tokens;
  done.num_preemptions = seq.num_preemptions;
  finished_.push_back(std::move(done));
  ++stats_.finished;
  seqs_.erase(id);  // destroys seq
}

// Swaps the sequence's KV out when the host swap pool holds its computed pages (they are copied
// before this step's forwards, which may write the device pages given up), else drops it: the
// sequence then recomputes. Either way its outputs stay those of an uninterrupted run.
void Scheduler::preempt(Sequence& seq, ScheduledStep& step) {
  ++seq.num_preemptions;
  ++stats_.preemptions;
  step.preempted.push_back(seq.id);
  const int32_t pages = blocks_.pages_for(seq.num_computed);
  if (seq.num_computed > 0 && pages <= static_cast<int32_t>(free_host_pages_.size())) {
    const std::span<const int32_t> table = blocks_.block_table(seq.id);
    seq.host_pages.clear();
    for (int32_t i = 0; i < pages; ++i) {
      seq.host_pages.push_back(free_host_pages_.back());
      free_host_pages_.pop_back();
      step.swap_out.push_back({table[i], seq.host_pages.back()});
    }
    blocks_.free(seq.id);
    seq.status = SequenceStatus::Swapped;
    swapped_.insert(std::upper_bound(swapped_.begin(), swapped_.end(), &seq,
                                     [](const Sequence* a, const Sequence* b) { return a->arrival < b->arrival; }),
                    &seq);
    ++stats_.swapped_out;
    stats_.swap_out_pages += pages;
    return;
  }
  blocks_.free(seq.id);
  seq.num_computed = 0;
  seq.status = SequenceStatus::Waiting;
  waiting_.push_front(&seq);
}

void Scheduler::set_prefill_cap(int32_t tokens) {
  if (tokens < 0) fail("scheduler: prefill cap ", tokens, ": expected >= 0");
  config_.prefill_cap = tokens;
}

bool Scheduler::swap_in(ScheduledStep& step, int32_t& budget) {
  Sequence& seq = *swapped_.front();
  // Fresh pages for every known token (no prefix-cache hits: the KV comes back from the host).
  if (!blocks_.can_allocate(seq.tokens, false)) return false;
  blocks_.allocate(seq.id, seq.tokens, false);
  const std::span<const int32_t> table = blocks_.block_table(seq.id);
  for (size_t i = 0; i < seq.host_pages.size(); ++i) {
    step.swap_in.push_back({table[i], seq.host_pages[i]});
    free_host_pages_.push_back(seq.host_pages[i]);  // reused no earlier than the next step's swap-outs
  }
  stats_.swap_in_pages += static_cast<int64_t>(seq.host_pages.size());
  seq.host_pages.clear();
  swapped_.erase(swapped_.begin());
  seq.status = SequenceStatus::Running;
  insert_running(&seq);
  // Its next tokens: the rest of its prompt, or one decode (its sample or a replayed token).
  const int32_t chunk = seq.num_computed < seq.num_prompt_tokens
                            ? std::min(seq.num_prompt_tokens - seq.num_computed, budget) : 1;
  PhaseStep& phase = seq.num_computed < seq.num_prompt_tokens ? step.prefill : step.decode;
  phase.seqs.push_back(make_scheduled(seq, chunk));
  budget -= chunk;
  return true;
}

void Scheduler::insert_running(Sequence* seq) {
  const auto at = std::upper_bound(running_.begin(), running_.end(), seq,
                                   [](const Sequence* a, const Sequence* b) { return a->arrival < b->arrival; });
  running_.insert(at, seq);
}

std::vector<FinishedRequest> Scheduler::take_finished() {
  std::vector<FinishedRequest> out = std::move(finished_);
  finished_.clear();
  return out;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats st = stats_;
  st.kv = blocks_.stats();
  return st;
}

}  // namespace kiln
