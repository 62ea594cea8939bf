#include "runtime/server/engine_loop.hpp"

#include <iostream>

namespace kiln {

namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

EngineLoop::EngineLoop(Engine& engine, const Tokenizer* tokenizer, ServerMetrics* metrics, EngineLoopOptions options)
    : engine_(engine), tokenizer_(tokenizer), metrics_(metrics), options_(options) {
  publish_gauges();
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

RequestId EngineLoop::submit(Request request, Sink sink) {
  std::future<RequestId> accepted;
  {
    std::lock_guard lock(mutex_);
    if (draining_ || stopping_) throw Overloaded("the server is shutting down");
    const int32_t waiting = waiting_.load() + static_cast<int32_t>(pending_.size());
    if (waiting >= options_.max_waiting) {
      if (metrics_) metrics_->add_rejected();
      throw Overloaded("the server is overloaded: " + std::to_string(waiting) +
                       " requests are waiting (--max-waiting " + std::to_string(options_.max_waiting) + ")");
    }
    pending_.push_back(Pending{std::move(request), std::move(sink), {}});
    accepted = pending_.back().accepted.get_future();
    ++unfinished_;
  }
  wake_.notify_all();
  return accepted.get();  // rethrows the engine's refusal
}

void EngineLoop::abort(RequestId id) {
  {
    std::lock_guard lock(mutex_);
    aborts_.push_back(id);
  }
  wake_.notify_all();
}

void EngineLoop::drain() {
  std::unique_lock lock(mutex_);
  draining_ = true;
  idle_.wait(lock, [&] { return unfinished_.load() == 0; });
}

void EngineLoop::run() {
  for (;;) {
    std::deque<Pending> pending;
    std::vector<RequestId> aborts;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !pending_.empty() || !aborts_.empty() || engine_.has_unfinished(); });
      if (stopping_) break;
      pending.swap(pending_);
      aborts.swap(aborts_);
    }
    admit(pending);
    for (RequestId id : aborts) {
      // Its pages are free now; finish_requests() counts it (nobody is told).
      if (active_.erase(id) > 0) engine_.abort(id, FinishReason::Aborted);
    }
    if (engine_.has_unfinished()) {
      std::vector<RequestId> stopped;
      try {
        engine_.step([&](const TokenEvent& e) { on_token(e, stopped); });
      } catch (const std::exception& e) {
        // A failed step (device error) leaves no consistent state to continue from.
        std::cerr << "kiln: engine step failed: " << e.what() << "\n";
        std::abort();
      }
      if (metrics_) metrics_->add_step();
      for (RequestId id : stopped) engine_.abort(id, FinishReason::StopString);
    }
    finish_requests();
    publish_gauges();
  }
  // Stopping: whatever is left is withdrawn.
  for (auto& [id, active] : active_) engine_.abort(id, FinishReason::Aborted);
  active_.clear();
  engine_.take_finished();
}

void EngineLoop::admit(std::deque<Pending>& pending) {
  for (Pending& p : pending) {
    const RequestId id = next_id_++;
    p.request.id = id;
    try {
      OutputProcessor output(tokenizer_, p.request.params);  // checks what needs a tokenizer
      engine_.add(p.request);
      active_.emplace(id, Active{std::move(output), std::move(p.sink), std::chrono::steady_clock::now(), {}, false, {}});
      p.accepted.set_value(id);
    } catch (...) {
      --unfinished_;
      p.accepted.set_exception(std::current_exception());
    }
  }
}

void EngineLoop::on_token(const TokenEvent& e, std::vector<RequestId>& stopped) {
  auto it = active_.find(e.id);
  if (it == active_.end()) return;  // aborted in this step
  Active& a = it->second;
  const auto now = std::chrono::steady_clock::now();
  if (e.token >= 0 && metrics_) {
    metrics_->add_generation_tokens(1);
    if (!a.has_token) {
      metrics_->observe_ttft(seconds_between(a.arrival, now));
    } else {
      metrics_->observe_inter_token(seconds_between(a.last_token, now));
    }
  }
  a.has_token = a.has_token || e.token >= 0;
  a.last_token = now;
  OutputDelta delta = a.output.push(e);
  if (!delta.finished) {
    a.sink(delta, RequestSummary{});
    return;
  }
  // The last delta goes out with the request's accounting, once the engine has finished it.
  if (!e.finished) stopped.push_back(e.id);  // a stop string: the engine does not know yet
  a.final_delta = std::move(delta);
}

void EngineLoop::finish_requests() {
  for (const FinishedRequest& f : engine_.take_finished()) {
    auto it = active_.find(f.id);
    if (it == active_.end()) {
      // Withdrawn by its client: nobody to tell.
      if (metrics_) metrics_->add_finished("abort", f.num_prompt_tokens, f.num_cached_prompt_tokens, 0, 0.0, f.num_preemptions);
      --unfinished_;
      continue;
    }
    Active& a = it->second;
    OutputDelta last = a.final_delta ? std::move(*a.final_delta) : OutputDelta{};
    last.finished = true;
    if (last.reason == FinishReason::None) last.reason = f.reason;
    a.sink(last, RequestSummary{f.num_prompt_tokens, f.num_cached_prompt_tokens, a.output.num_tokens()});
    if (metrics_) {
      metrics_->add_finished(openai_finish_reason(last.reason), f.num_prompt_tokens, f.num_cached_prompt_tokens,
                             a.output.num_tokens(), seconds_between(a.arrival, std::chrono::steady_clock::now()),
                             f.num_preemptions);
    }
    active_.erase(it);
    --unfinished_;
  }
  if (unfinished_.load() == 0) {
    std::lock_guard lock(mutex_);
    idle_.notify_all();
  }
}

void EngineLoop::publish_gauges() {
  const Scheduler& s = engine_.scheduler();
  waiting_.store(s.num_waiting());
  if (!metrics_) return;
  const BlockManagerStats kv = s.blocks().stats();
  MetricsGauges g;
  g.running = s.num_running();
  g.waiting = s.num_waiting();
  g.kv_pages = kv.num_pages;
  g.kv_pages_in_use = kv.pages_in_use;
  g.kv_cache_usage = kv.num_pages > 0 ? static_cast<double>(kv.pages_in_use) / kv.num_pages : 0.0;
  metrics_->set_gauges(g);
}

}  // namespace kiln
