#include <catch2/catch.hpp>

#include <map>
#include <numeric>
#include <vector>

#include "fake_model.hpp"
#include "runtime/core/error.hpp"
#include "runtime/serving/scheduler.hpp"
#include "serving_driver.hpp"

using namespace kiln;
using namespace kiln::testing;
using V = std::vector<int32_t>;

namespace {

SchedulerConfig config(int32_t max_num_seqs, int32_t max_batched_tokens, int32_t max_context = 64,
                       int32_t vocab_size = 100) {
  SchedulerConfig c;
  c.max_num_seqs = max_num_seqs;
  c.max_batched_tokens = max_batched_tokens;
  c.max_context = max_context;
  c.vocab_size = vocab_size;
  c.eos_token_ids = {0};
  return c;
}

Request request(RequestId id, V prompt, int32_t max_tokens = 16) {
  Request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  r.params.seed = 1000 + id;
  return r;
}

V range(int32_t first, int32_t count) {
  V v(count);
  std::iota(v.begin(), v.end(), first);
  return v;
}

SampleOutput token(int32_t t, float logprob = 0.0f) { return SampleOutput{t, logprob, kSampleOk}; }

// A step's sequences in sample order: its decode phase, then its prefill phase.
std::vector<ScheduledSeq> seqs(const ScheduledStep& step) {
  std::vector<ScheduledSeq> out = step.decode.seqs;
  out.insert(out.end(), step.prefill.seqs.begin(), step.prefill.seqs.end());
  return out;
}
V table(const ScheduledSeq& s) { return V(s.block_table.begin(), s.block_table.end()); }

// Every step until the requests have finished (24 KV slots of pages of 4): the steps and the results.
std::pair<std::vector<ScheduledStep>, std::map<RequestId, FinishedRequest>> run_to_end(
    Scheduler& s, const std::vector<Request>& requests, int32_t vocab) {
  FakeModel model(24, 4, vocab);
  for (const Request& r : requests) s.add(r);
  std::vector<ScheduledStep> steps;
  std::map<RequestId, FinishedRequest> done;
  while (s.has_unfinished()) {
    steps.push_back(run_step(s, model));
    for (FinishedRequest& f : s.take_finished()) done.emplace(f.id, std::move(f));
    REQUIRE(steps.size() < 50);
  }
  return {steps, done};
}

}  // namespace

TEST_CASE("prefill chunks fill the token budget, and a partial prefill continues first") {
  Scheduler s(config(4, 8), BlockManager(32, 4));
  s.add(request(1, range(1, 10)));
  s.add(request(2, range(11, 5)));

  const ScheduledStep step1 = s.schedule();
  REQUIRE(seqs(step1).size() == 1);  // A's first 8 tokens use the whole budget; B waits
  CHECK(seqs(step1)[0].id == 1);
  CHECK(seqs(step1)[0].start == 0);
  CHECK(seqs(step1)[0].new_tokens == range(1, 8));
  CHECK(table(seqs(step1)[0]) == V{0, 1, 2});  // the whole prompt has its slots
  CHECK_FALSE(seqs(step1)[0].samples);
  CHECK(step1.num_tokens() == 8);
  CHECK(static_cast<int32_t>(step1.decode.seqs.size()) == 0);
  CHECK(s.num_waiting() == 1);
  CHECK(s.on_step_done(step1, {}).empty());

  const ScheduledStep step2 = s.schedule();
  REQUIRE(seqs(step2).size() == 2);
  CHECK(seqs(step2)[0].id == 1);
  CHECK(seqs(step2)[0].start == 8);
  CHECK(seqs(step2)[0].new_tokens == V{9, 10});
  CHECK(seqs(step2)[0].samples);
  CHECK(seqs(step2)[0].sampler.counter == 0);
  CHECK(seqs(step2)[0].sampler.seed == 1001);
  CHECK(seqs(step2)[1].id == 2);
  CHECK(seqs(step2)[1].start == 0);
  CHECK(seqs(step2)[1].new_tokens == range(11, 5));
  CHECK(table(seqs(step2)[1]) == V{3, 4});
  CHECK(seqs(step2)[1].samples);
  CHECK(step2.num_tokens() == 7);
  const std::vector<TokenEvent> events = s.on_step_done(step2, std::vector<SampleOutput>{token(50), token(60)});
  REQUIRE(events.size() == 2);
  CHECK(events[0].id == 1);
  CHECK(events[0].token == 50);
  CHECK(events[1].token == 60);
  CHECK_FALSE(events[1].finished);

  // Decodes come first, oldest first, then the new prefill.
  s.add(request(3, V{7, 7, 7}));
  const ScheduledStep step3 = s.schedule();
  REQUIRE(seqs(step3).size() == 3);
  CHECK(static_cast<int32_t>(step3.decode.seqs.size()) == 2);
  CHECK(seqs(step3)[0].id == 1);
  CHECK(seqs(step3)[0].start == 10);
  CHECK(seqs(step3)[0].new_tokens == V{50});
  CHECK(seqs(step3)[0].sampler.counter == 1);
  CHECK(seqs(step3)[1].id == 2);
  CHECK(seqs(step3)[1].start == 5);
  CHECK(seqs(step3)[1].new_tokens == V{60});
  CHECK(table(seqs(step3)[1]) == V{3, 4});
  CHECK(seqs(step3)[2].id == 3);
  CHECK(seqs(step3)[2].new_tokens == V{7, 7, 7});
  CHECK(table(seqs(step3)[2]) == V{5});
  CHECK(step3.num_tokens() == 5);

  const SchedulerStats st = s.stats();
  CHECK(st.steps == 3);
  CHECK(st.prefill_tokens == 8 + 7 + 3);
  CHECK(st.decode_tokens == 2);
}

TEST_CASE("max_num_seqs caps the running set and the queue head is never skipped") {
  Scheduler s(config(2, 64), BlockManager(8, 4));
  s.add(request(1, range(1, 20)));  // 5 pages
  s.add(request(2, range(1, 16)));  // 4 pages: does not fit next to request 1
  s.add(request(3, V{5, 6}));       // would fit, but waits behind request 2
  ScheduledStep step = s.schedule();
  REQUIRE(seqs(step).size() == 1);
  CHECK(s.num_running() == 1);
  CHECK(s.num_waiting() == 2);
  s.on_step_done(step, std::vector<SampleOutput>{token(9)});

  Scheduler capped(config(2, 64), BlockManager(64, 4));
  for (RequestId id = 1; id <= 3; ++id) capped.add(request(id, V{1, 2, 3}));
  step = capped.schedule();
  CHECK(seqs(step).size() == 2);
  CHECK(capped.num_waiting() == 1);
}

TEST_CASE("running out of pages preempts the newest sequence which later finishes unchanged") {
  const int32_t vocab = 50;
  const SchedulerConfig cfg = config(4, 32, 64, vocab);
  auto make = [](RequestId id, V prompt) {
    Request r = request(id, std::move(prompt), 6);
    r.params.ignore_eos = true;
    return r;
  };

  SECTION("an older decode needs the page") {
    // 6 pages of 4: two 10-token prompts take 3 pages each. At the 4th step A's next token needs a
    // 4th page: B, the newest, is preempted. B's full pages stay cached, so it resumes with 8 of its
    // 12 tokens from the cache once A has finished.
    const std::vector<Request> requests = {make(1, range(1, 10)), make(2, range(20, 10))};
    Scheduler s(cfg, BlockManager(6, 4));
    FakeModel model(24, 4, vocab);
    for (const Request& r : requests) s.add(r);
    std::vector<std::vector<RequestId>> preempted;
    std::map<RequestId, FinishedRequest> done;
    while (s.has_unfinished()) {
      preempted.push_back(run_step(s, model).preempted);
      for (FinishedRequest& f : s.take_finished()) done.emplace(f.id, std::move(f));
      REQUIRE(preempted.size() < 50);
    }
    REQUIRE(preempted.size() > 4);
    CHECK(preempted[3] == std::vector<RequestId>{2});
    for (size_t i = 0; i < preempted.size(); ++i) {
      if (i != 3) CHECK(preempted[i].empty());
    }
    CHECK(done.at(2).num_preemptions == 1);
    CHECK(done.at(1).num_preemptions == 0);
    CHECK(done.at(2).num_cached_prompt_tokens == 0);  // its first admission found nothing cached
    const SchedulerStats st = s.stats();
    CHECK(st.preemptions == 1);
    CHECK(st.kv.prefix_hit_tokens == 8);
    CHECK(st.kv.pages_in_use == 0);
    for (const Request& r : requests) {
      const FinishedRequest alone = run_alone(cfg, 64, 4, r, vocab);
      CHECK(done.at(r.id).output_tokens == alone.output_tokens);
      CHECK(done.at(r.id).output_tokens.size() == 6);
      CHECK(done.at(r.id).reason == FinishReason::MaxTokens);
    }
  }

  SECTION("the newest decode needs the page and preempts itself") {
    // A's prompt is one token shorter, so B crosses into a 4th page first.
    const std::vector<Request> requests = {make(1, range(1, 9)), make(2, range(20, 10))};
    Scheduler s(cfg, BlockManager(6, 4));
    const auto [steps, done] = run_to_end(s, requests, vocab);
    CHECK(steps[3].preempted == std::vector<RequestId>{2});
    REQUIRE(seqs(steps[3]).size() == 1);
    CHECK(seqs(steps[3])[0].id == 1);
    CHECK(s.stats().preemptions == 1);
    for (const Request& r : requests) {
      CHECK(done.at(r.id).output_tokens == run_alone(cfg, 64, 4, r, vocab).output_tokens);
    }
  }
}

TEST_CASE("a preempted sequence swaps its KV to host pages and back when they hold it, else recomputes") {
  const int32_t vocab = 50;
  auto make = [](RequestId id, V prompt) {
    Request r = request(id, std::move(prompt), 6);
    r.params.ignore_eos = true;
    return r;
  };
  // As above: 6 pages of 4, B (10 prompt tokens + 2 generated) preempted at the 4th step holding
  // 12 computed tokens: 3 pages.
  const std::vector<Request> requests = {make(1, range(1, 10)), make(2, range(20, 10))};
  for (int32_t swap_pages : {3, 2}) {
    SchedulerConfig cfg = config(4, 32, 64, vocab);
    cfg.swap_pages = swap_pages;
    Scheduler s(cfg, BlockManager(6, 4));
    const auto [steps, done] = run_to_end(s, requests, vocab);
    INFO(swap_pages << " swap pages");
    REQUIRE(steps.size() > 4);
    CHECK(steps[3].preempted == std::vector<RequestId>{2});
    const SchedulerStats st = s.stats();
    CHECK(st.preemptions == 1);
    if (swap_pages == 3) {
      // Its 3 pages go out in that step and come back (to fresh pages) when A has finished; nothing
      // is recomputed, so the prefix cache is not asked.
      REQUIRE(steps[3].swap_out.size() == 3);
      CHECK(st.swapped_out == 1);
      CHECK(st.swap_out_pages == 3);
      CHECK(st.swap_in_pages == 3);
      CHECK(st.kv.prefix_hit_tokens == 0);
      size_t swap_ins = 0;
      for (const ScheduledStep& step : steps) {
        if (step.swap_in.empty()) continue;
        ++swap_ins;
        REQUIRE(step.swap_in.size() == 3);
        for (size_t i = 0; i < 3; ++i) CHECK(step.swap_in[i].host_page == steps[3].swap_out[i].host_page);
        REQUIRE(step.decode.seqs.size() == 1);
        CHECK(step.decode.seqs[0].id == 2);
        CHECK(step.decode.seqs[0].start == 12);
      }
      CHECK(swap_ins == 1);
    } else {
      CHECK(steps[3].swap_out.empty());  // 2 host pages cannot hold 3: recompute, helped by the cache
      CHECK(st.swapped_out == 0);
      CHECK(st.kv.prefix_hit_tokens == 8);
    }
    CHECK(st.kv.pages_in_use == 0);
    for (const Request& r : requests) {
      CHECK(done.at(r.id).output_tokens == run_alone(config(4, 32, 64, vocab), 64, 4, r, vocab).output_tokens);
    }
  }
}

TEST_CASE("a prefill cap bounds the prompt tokens of steps that also decode, never of prefill-only steps") {
  const int32_t vocab = 50;
  SchedulerConfig cfg = config(4, 32, 128, vocab);
  cfg.prefill_cap = 5;
  Scheduler s(cfg, BlockManager(40, 4));
  FakeModel model(160, 4, vocab);
  Request a = request(1, range(1, 6), 8), b = request(2, V(60, 7), 4);
  a.params.ignore_eos = b.params.ignore_eos = true;
  s.add(a);
  const ScheduledStep first = run_step(s, model);  // A's prompt alone: no decodes, no cap
  CHECK(first.prefill.num_tokens == 6);
  s.add(b);
  std::vector<ScheduledStep> steps;
  std::map<RequestId, FinishedRequest> done;
  while (s.has_unfinished()) {
    steps.push_back(run_step(s, model));
    for (FinishedRequest& f : s.take_finished()) done.emplace(f.id, std::move(f));
    REQUIRE(steps.size() < 50);
  }
  // B's 60-token prompt goes 5 tokens a step beside A's decodes, then, A finished, in a whole chunk.
  CHECK(steps[0].decode.num_tokens == 1);
  CHECK(steps[0].prefill.num_tokens == 5);
  bool uncapped_alone = false;
  for (const ScheduledStep& step : steps) {
    if (!step.decode.empty()) CHECK(step.prefill.num_tokens <= 5);
    uncapped_alone |= step.decode.empty() && step.prefill.num_tokens > 5;
  }
  CHECK(uncapped_alone);
  s.set_prefill_cap(0);  // off again
  CHECK(s.config().prefill_cap == 0);
  CHECK_THROWS(s.set_prefill_cap(-1));
  for (const Request& r : {a, b}) {
    CHECK(done.at(r.id).output_tokens == run_alone(config(4, 32, 128, vocab), 40, 4, r, vocab).output_tokens);
  }
}

TEST_CASE("sequences finish on EOS or stop tokens or max_tokens or max context or bad logits") {
  SchedulerConfig cfg = config(8, 128, 64);
  cfg.eos_token_ids = {0, 99};
  Scheduler s(cfg, BlockManager(64, 4));

  Request max_tokens = request(1, V{5, 6, 7}, 3);
  Request eos = request(2, V{8}, 10);
  Request stop = request(3, V{9, 9}, 10);
  stop.params.ignore_eos = true;
  stop.params.stop_token_ids = {33};
  Request context = request(4, range(1, 60), 100);
  Request bad = request(5, V{1, 2}, 10);
  Request logprobs = request(6, V{3}, 2);
  logprobs.params.logprobs = true;
  for (const Request& r : {max_tokens, eos, stop, context, bad, logprobs}) s.add(r);

  std::map<RequestId, std::vector<SampleOutput>> script = {
      {1, {token(20), token(21), token(22)}},
      {2, {token(30), token(99)}},
      {3, {token(0), token(99), token(33)}},
      {4, {token(40), token(41), token(42), token(43)}},
      {5, {SampleOutput{-1, 0.0f, kSampleBadLogits}}},
      {6, {token(50, -0.5f), token(51, -1.25f)}},
  };
  std::map<RequestId, size_t> fed;
  std::map<RequestId, FinishedRequest> done;
  std::vector<TokenEvent> events;
  for (int i = 0; i < 20 && s.has_unfinished(); ++i) {
    const ScheduledStep step = s.schedule();
    std::vector<SampleOutput> samples;
    for (const ScheduledSeq& q : seqs(step)) {
      if (q.samples) samples.push_back(script.at(q.id).at(fed[q.id]++));
    }
    for (const TokenEvent& e : s.on_step_done(step, samples)) events.push_back(e);
    for (FinishedRequest& f : s.take_finished()) done.emplace(f.id, std::move(f));
  }
  REQUIRE_FALSE(s.has_unfinished());
  CHECK(done.at(1).reason == FinishReason::MaxTokens);
  CHECK(done.at(1).output_tokens == V{20, 21, 22});
  CHECK(done.at(2).reason == FinishReason::Eos);
  CHECK(done.at(2).output_tokens == V{30, 99});
  CHECK(done.at(3).reason == FinishReason::StopToken);
  CHECK(done.at(3).output_tokens == V{0, 99, 33});  // ignore_eos: EOS ids are ordinary tokens
  CHECK(done.at(4).reason == FinishReason::MaxContext);
  CHECK(done.at(4).output_tokens == V{40, 41, 42, 43});  // 60 + 4 = the 64-token context
  CHECK(done.at(5).reason == FinishReason::BadLogits);
  CHECK(done.at(5).output_tokens.empty());
  CHECK(done.at(6).logprobs == std::vector<float>{-0.5f, -1.25f});
  CHECK(done.at(1).logprobs.empty());
  CHECK(done.at(1).num_prompt_tokens == 3);
  for (const auto& [id, lines] : script) CHECK(fed[id] == lines.size());

  int finished_events = 0;
  for (const TokenEvent& e : events) finished_events += e.finished ? 1 : 0;
  CHECK(finished_events == 6);
  CHECK(events.size() == 3 + 2 + 3 + 4 + 1 + 2);
  const SchedulerStats st = s.stats();
  CHECK(st.finished == 6);
  CHECK(st.kv.pages_in_use == 0);
}

TEST_CASE("requests that can never be served are rejected alone") {
  Scheduler s(config(4, 64, 64), BlockManager(8, 4));  // a 32-token pool under a 64-token context
  CHECK(s.context_limit() == 32);
  const auto rejected = [&](Request r) {
    try {
      s.add(std::move(r));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(rejected(request(1, range(0, 65))) ==
        "request 1 rejected: the prompt has 65 tokens; the model's max context is 64");
  CHECK_THAT(rejected(request(2, range(0, 33))),
             Catch::Contains("needs 9 KV pages; the whole pool has 8 pages of 4 tokens"));
  CHECK_THAT(rejected(request(3, V{})), Catch::Contains("request 3 rejected: the prompt is empty"));
  CHECK_THAT(rejected(request(4, V{5, 100})), Catch::Contains("prompt token 1 = 100 is outside the vocabulary [0, 100)"));
  Request hot = request(5, V{1});
  hot.params.temperature = -1.0f;
  CHECK_THAT(rejected(hot), Catch::Contains("request 5 rejected: sampling parameter temperature = -1"));
  Request stop = request(6, V{1});
  stop.params.stop_token_ids = {150};
  CHECK_THAT(rejected(stop), Catch::Contains("stop token 150 is outside"));

  Request ok = request(10, range(1, 30), 10);
  ok.params.ignore_eos = true;
  CHECK(rejected(ok) == "accepted");
  CHECK_THAT(rejected(request(10, V{1})), Catch::Contains("request 10 rejected: the id is already in use"));
  CHECK(s.stats().rejected == 7);
  CHECK(s.num_waiting() == 1);

  // The accepted one runs; the pool (not the model) caps it at 32 tokens, and says so (issue 13:
  // this was reported as max_context).
  FakeModel model(32, 4, 100);
  ServeResult result = serve(s, model, {}, {});
  REQUIRE(result.finished.count(10));
  CHECK(result.finished.at(10).reason == FinishReason::KvPoolFull);
  CHECK(result.finished.at(10).output_tokens.size() == 2);
}

TEST_CASE("scheduler configuration and step protocol are checked") {
  CHECK_THROWS_WITH(Scheduler(config(8, 4), BlockManager(8, 4)),
                    Catch::Contains("max_batched_tokens = 4: expected >= max_num_seqs (8)"));
  SchedulerConfig bad_eos = config(4, 16);
  bad_eos.eos_token_ids = {100};
  CHECK_THROWS_WITH(Scheduler(bad_eos, BlockManager(8, 4)), Catch::Contains("EOS token 100 is outside"));

  Scheduler s(config(4, 16), BlockManager(8, 4));
  s.add(request(1, V{1, 2, 3}));
  const ScheduledStep step = s.schedule();
  CHECK_THROWS_WITH(s.schedule(), Catch::Contains("before on_step_done"));
  CHECK_THROWS_WITH(s.on_step_done(step, {}), Catch::Contains("1 sampling sequences but 0 samples"));
  s.on_step_done(step, std::vector<SampleOutput>{token(4)});
  CHECK_NOTHROW(s.schedule());
}
