// The whole serving path under memory pressure: many requests with shared prefixes, staggered
// arrivals, chunked prefill, prefix caching and preemptions — every request's output must equal
// the output of the same request served alone (greedy and seeded sampling alike).
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "fake_model.hpp"
#include "runtime/serving/scheduler.hpp"
#include "serving_driver.hpp"

using namespace kiln;
using namespace kiln::testing;

namespace {

constexpr int32_t kVocab = 64;

std::vector<Request> make_requests(uint32_t seed, int count) {
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::vector<int32_t>> system_prompts;
  for (int len : {12, 16, 9}) {
    std::vector<int32_t> p;
    for (int i = 0; i < len; ++i) p.push_back(uniform(1, kVocab - 1));
    system_prompts.push_back(p);
  }
  std::vector<Request> requests;
  for (int i = 0; i < count; ++i) {
    Request r;
    r.id = 100 + static_cast<RequestId>(i);
    if (i % 4 != 3) r.prompt = system_prompts[i % 3];  // most share a prefix
    const int tail = uniform(1, 25);
    for (int j = 0; j < tail; ++j) r.prompt.push_back(uniform(1, kVocab - 1));
    r.params.max_tokens = uniform(4, 40);
    if (i % 2 == 0) {
      r.params.temperature = 0.0f;
    } else {
      r.params.temperature = 0.8f;
      r.params.top_k = 20;
      r.params.top_p = 0.9f;
      r.params.min_p = 0.02f;
      r.params.seed = 7 * static_cast<uint64_t>(i) + 1;
    }
    r.params.ignore_eos = i % 3 == 0;
    if (i % 5 == 1) r.params.stop_token_ids = {5, 6};
    r.params.logprobs = i % 4 == 1;
    requests.push_back(std::move(r));
  }
  return requests;
}

struct Shape {
  int32_t page_size;
  int32_t num_pages;
  int32_t max_num_seqs;
  int32_t max_batched_tokens;
};

SchedulerConfig config_for(const Shape& shape) {
  SchedulerConfig c;
  c.max_num_seqs = shape.max_num_seqs;
  c.max_batched_tokens = shape.max_batched_tokens;
  c.max_context = 72;
  c.vocab_size = kVocab;
  c.eos_token_ids = {0};
  return c;
}

}  // namespace

TEST_CASE("served under pressure every request produces what it produces alone") {
  const std::vector<Shape> shapes = {
      {4, 20, 6, 24},   // small pages, tight pool, small budget: chunking and preemption
      {16, 6, 4, 32},   // large pages: coarse prefix hits, whole-page preemptions
      {1, 90, 7, 7},    // one-token pages, a budget of one token per running sequence
  };
  const std::vector<Request> requests = make_requests(2024, 24);
  std::vector<int64_t> arrivals;
  for (size_t i = 0; i < requests.size(); ++i) arrivals.push_back(static_cast<int64_t>(i / 3));

  for (const Shape& shape : shapes) {
    INFO("page_size " << shape.page_size << " num_pages " << shape.num_pages << " max_num_seqs "
                      << shape.max_num_seqs << " max_batched_tokens " << shape.max_batched_tokens);
    const SchedulerConfig cfg = config_for(shape);
    Scheduler shared(cfg, BlockManager(shape.num_pages, shape.page_size));
    FakeModel model(shape.num_pages * shape.page_size, shape.page_size, kVocab);
    const ServeResult together = serve(shared, model, requests, arrivals);

    CHECK(together.stats.preemptions > 0);
    CHECK(together.stats.kv.prefix_hit_tokens > 0);
    CHECK(together.chunked_prefills > 0);
    CHECK(together.stats.kv.pages_in_use == 0);
    REQUIRE(together.finished.size() == requests.size());

    int reasons[static_cast<int>(FinishReason::BadLogits) + 1] = {};
    for (const Request& r : requests) {
      const FinishedRequest a = run_alone(cfg, shape.num_pages, shape.page_size, r, kVocab);
      const FinishedRequest& t = together.finished.at(r.id);
      INFO("request " << r.id);
      CHECK(t.output_tokens == a.output_tokens);
      CHECK(t.reason == a.reason);
      CHECK(t.logprobs == a.logprobs);
      CHECK(t.logprobs.size() == (r.params.logprobs ? t.output_tokens.size() : 0));
      ++reasons[static_cast<int>(t.reason)];
    }
    // The mix exercises several ways to finish.
    CHECK(reasons[static_cast<int>(FinishReason::MaxTokens)] > 0);
    CHECK(reasons[static_cast<int>(FinishReason::Eos)] + reasons[static_cast<int>(FinishReason::StopToken)] +
              reasons[static_cast<int>(FinishReason::MaxContext)] + reasons[static_cast<int>(FinishReason::KvPoolFull)] >
          0);
  }
}
