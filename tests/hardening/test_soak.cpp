// Issue 13: the serving soak on the CPU reference backend. 2,000 requests of random lengths,
// sampling settings and seeds go through one engine whose KV pool holds only a few of them at once
// (so the scheduler preempts and recomputes over and over, with prefix-cache hits among prompts
// that share a start). Every request must finish exactly once, and its output (tokens, finish
// reason, logprobs) must equal the output of the same request run alone on a fresh engine with a
// pool large enough for it. A difference is a failure that names the request; nothing is retried.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <random>

#include "model.hpp"  // generated/tiny-llama
#include "runtime/engine/engine.hpp"

using namespace kiln;

namespace {

constexpr int kRequests = 2000;
constexpr uint64_t kWeightSeed = 11;

// Random requests: prompts of 1..96 tokens, a third of them starting with one of a few shared
// prefixes (prefix-cache hits), 1..64 new tokens, and every sampling option in play.
std::vector<Request> random_requests(const ModelInfo& m, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(uniform(m.page_size, 3 * m.page_size)));
    for (int32_t& t : p) t = uniform(3, m.vocab_size - 1);
    prefixes.push_back(std::move(p));
  }
  std::vector<Request> out;
  for (int i = 0; i < kRequests; ++i) {
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

int32_t pages_for(const ModelInfo& m, const Request& r) {
  const int32_t tokens = static_cast<int32_t>(r.prompt.size()) + r.params.max_tokens;
  return (tokens + m.page_size - 1) / m.page_size;
}

}  // namespace

TEST_CASE("serving soak: 2000 random requests through a small KV pool finish as if each ran alone") {
  const ModelDef& model = models::tiny_llama::model_def();
  const ModelInfo& m = model.info;
  const std::vector<Request> requests = random_requests(m, 2024);

  // The pool: the largest request fits, but only a few average ones at once (far fewer than 10%
  // of them, and fewer than the model's max_batch of concurrent sequences).
  int32_t largest = 0;
  int64_t total = 0;
  for (const Request& r : requests) {
    largest = std::max(largest, pages_for(m, r));
    total += pages_for(m, r);
  }
  const int32_t pool = std::max<int32_t>(largest, static_cast<int32_t>(3 * total / kRequests));
  REQUIRE(pool < m.max_batch * total / kRequests);
  INFO("KV pool of " << pool << " pages; the requests need " << total << " in all, at most " << largest << " each");

  const auto start = std::chrono::steady_clock::now();
  const auto small = make_cpu_backend(model, WeightOrigin{nullptr, kWeightSeed}, BackendOptions{.kv_pages = pool});
  Engine engine(model, *small, EngineOptions{});
  for (const Request& r : requests) engine.add(r);
  std::map<RequestId, FinishedRequest> together;
  for (FinishedRequest& f : engine.run()) {
    const RequestId id = f.id;
    CHECK(together.emplace(id, std::move(f)).second);  // finished once
  }
  const double together_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const SchedulerStats stats = engine.stats().scheduler;
  CHECK(together.size() == requests.size());  // none lost
  CHECK(stats.preemptions >= 100);            // the pool really was too small
  CHECK(stats.kv.pages_in_use == 0);

  // Each alone: a fresh engine (no shared prefix cache) over a pool with room to spare.
  const auto big = make_cpu_backend(model, WeightOrigin{nullptr, kWeightSeed}, BackendOptions{});
  int differing = 0, preempted = 0;
  for (const Request& r : requests) {
    Engine alone_engine(model, *big, EngineOptions{});
    alone_engine.add(r);
    const std::vector<FinishedRequest> alone = alone_engine.run();
    REQUIRE(alone.size() == 1);
    const auto it = together.find(r.id);
    if (it == together.end()) continue;  // counted above
    const FinishedRequest& t = it->second;
    preempted += t.num_preemptions > 0;
    if (t.output_tokens != alone[0].output_tokens || t.reason != alone[0].reason || t.logprobs != alone[0].logprobs) {
      ++differing;
      INFO("request " << r.id << " (prompt " << r.prompt.size() << " tokens, max_tokens " << r.params.max_tokens
                      << ", temperature " << r.params.temperature << ", preempted " << t.num_preemptions << " times)");
      CHECK(t.output_tokens == alone[0].output_tokens);
      CHECK(finish_reason_name(t.reason) == finish_reason_name(alone[0].reason));
      CHECK(t.logprobs == alone[0].logprobs);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  WARN("soak: " << requests.size() << " requests, " << stats.preemptions << " preemptions (" << preempted
                << " requests preempted), pool " << pool << " pages, " << stats.kv.prefix_hit_tokens
                << " prompt tokens from the prefix cache; " << differing << " outputs differ from running alone; "
                << together_seconds << " s together, " << seconds << " s in all");
  CHECK(differing == 0);
}
