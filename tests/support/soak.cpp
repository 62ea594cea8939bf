#include "tests/support/soak.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <sstream>

#include "runtime/engine/engine.hpp"

namespace kiln::test {
namespace {

// Prompts of 1..96 tokens, a third of them starting with one of four shared prefixes (prefix-cache
// hits), 1..64 new tokens, and every sampling option in play.
std::vector<Request> random_requests(const ModelInfo& m, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(uniform(m.page_size, 3 * m.page_size)));
    for (int32_t& t : p) t = uniform(3, m.vocab_size - 1);
    prefixes.push_back(std::move(p));
  }
  std::vector<Request> out;
  for (int i = 0; i < count; ++i) {
    Request r;
    r.id = static_cast<RequestId>(i + 1);
    if (uniform(0, 2) == 0) r.prompt = prefixes[static_cast<size_t>(uniform(0, 3))];
    const int extra = uniform(r.prompt.empty() ? 1 : 0, 96 - static_cast<int>(r.prompt.size()));
    for (int k = 0; k < extra; ++k) r.prompt.push_back(uniform(0, m.vocab_size - 1));
    SamplingParams& p = r.params;
    p.max_tokens = uniform(1, 64);
    const float temperatures[] = {0.0f, 0.5f, 0.8f, 1.0f, 1.5f};
    p.temperature = temperatures[uniform(0, 4)];
    p.top_p = uniform(0, 1) ? 1.0f : 0.5f + 0.05f * static_cast<float>(uniform(0, 10));
    p.top_k = uniform(0, 1) ? 0 : uniform(1, 100);
    p.min_p = uniform(0, 3) ? 0.0f : 0.05f * static_cast<float>(uniform(1, 4));
    p.seed = static_cast<uint64_t>(rng());
    p.ignore_eos = uniform(0, 1) == 0;
    if (uniform(0, 4) == 0) p.stop_token_ids = {uniform(0, m.vocab_size - 1), uniform(0, m.vocab_size - 1)};
    p.logprobs = uniform(0, 3) == 0;
    out.push_back(std::move(r));
  }
  return out;
}

int64_t pages_for(const ModelInfo& m, const Request& r) {
  const int64_t tokens = static_cast<int64_t>(r.prompt.size()) + r.params.max_tokens;
  return (tokens + m.page_size - 1) / m.page_size;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::string SoakReport::summary() const {
  std::ostringstream out;
  out << "soak: " << requests << " requests, " << finished << " finished (" << finished_twice << " twice), "
      << preemptions << " preemptions over " << preempted_requests << " requests, KV pool " << pool_pages
      << " pages for " << needed_pages << " needed in all, " << prefix_hit_tokens
      << " prompt tokens from the prefix cache; " << differing << " outputs differ from running alone; "
      << seconds_together << " s together, " << seconds_alone << " s alone";
  return out.str();
}

SoakReport run_soak(const ModelDef& model, int num_requests, uint32_t seed,
                    const std::function<std::unique_ptr<Backend>(int32_t kv_pages)>& make_backend) {
  const ModelInfo& m = model.info;
  const std::vector<Request> requests = random_requests(m, num_requests, seed);
  SoakReport report;
  report.requests = num_requests;

  // The pool holds the largest request, but only about three average ones: far fewer than 10% of
  // the requests, and fewer than the model's max_batch sequences at once.
  int64_t largest = 0;
  for (const Request& r : requests) {
    largest = std::max(largest, pages_for(m, r));
    report.needed_pages += pages_for(m, r);
  }
  report.pool_pages = static_cast<int32_t>(std::max<int64_t>(largest, 3 * report.needed_pages / num_requests));

  auto start = std::chrono::steady_clock::now();
  std::map<RequestId, FinishedRequest> together;
  {
    const std::unique_ptr<Backend> small = make_backend(report.pool_pages);
    Engine engine(model, *small, EngineOptions{});
    for (const Request& r : requests) engine.add(r);
    for (FinishedRequest& f : engine.run()) {
      const RequestId id = f.id;
      if (!together.emplace(id, std::move(f)).second) ++report.finished_twice;
    }
    const SchedulerStats stats = engine.stats().scheduler;
    report.preemptions = stats.preemptions;
    report.prefix_hit_tokens = stats.kv.prefix_hit_tokens;
    report.pages_in_use_after = stats.kv.pages_in_use;
  }
  report.finished = static_cast<int>(together.size());
  report.seconds_together = seconds_since(start);

  start = std::chrono::steady_clock::now();
  const std::unique_ptr<Backend> big = make_backend(0);
  for (const Request& r : requests) {
    const auto it = together.find(r.id);
    if (it == together.end()) continue;  // lost: counted by `finished`
    Engine engine(model, *big, EngineOptions{});
    engine.add(r);
    const std::vector<FinishedRequest> alone = engine.run();
    const FinishedRequest& t = it->second;
    report.preempted_requests += t.num_preemptions > 0;
    const bool same = alone.size() == 1 && t.output_tokens == alone[0].output_tokens && t.reason == alone[0].reason &&
                      t.logprobs == alone[0].logprobs;
    if (same) continue;
    ++report.differing;
    if (report.differences.size() < 10 && alone.size() == 1) {
      const auto& a = alone[0].output_tokens;
      const auto first = std::mismatch(t.output_tokens.begin(), t.output_tokens.end(), a.begin(), a.end());
      std::ostringstream line;
      line << "request " << r.id << " (prompt " << r.prompt.size() << " tokens, max_tokens " << r.params.max_tokens
           << ", temperature " << r.params.temperature << ", preempted " << t.num_preemptions << " times): "
           << t.output_tokens.size() << " tokens (" << finish_reason_name(t.reason) << ") together, " << a.size()
           << " (" << finish_reason_name(alone[0].reason) << ") alone, first different at output position "
           << (first.first - t.output_tokens.begin());
      report.differences.push_back(line.str());
    }
  }
  report.seconds_alone = seconds_since(start);
  return report;
}

}  // namespace kiln::test
