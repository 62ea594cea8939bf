// Structured output in the scheduler (SamplingParams::constraint): the constraint's bans become
// banned logit edits merged with the request's own (logit_bias kept), the end tokens (EOS,
// stop_token_ids) are banned until the constraint lets the text end and let through after, and the
// constraint hears every sampled token but the end tokens.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/serving/sample_batch.hpp"
#include "runtime/serving/scheduled_step.hpp"
#include "runtime/serving/scheduler.hpp"
#include "runtime/serving/token_constraint.hpp"

using namespace kiln;

namespace {

// Allows script[k] at the k-th sample, then only the end.
struct ScriptState : TokenConstraintState {
  std::vector<int32_t> script;
  std::shared_ptr<std::vector<int32_t>> heard;
  size_t k = 0;
  void banned(int32_t vocab_size, std::vector<int32_t>& out, bool& can_end) override {
    out.clear();
    for (int32_t id = 0; id < vocab_size; ++id) {
      if (k >= script.size() || id != script[k]) out.push_back(id);
    }
    can_end = k >= script.size();
  }
  void accept(int32_t token) override {
    heard->push_back(token);
    ++k;
  }
};
struct Script : TokenConstraint {
  std::vector<int32_t> script;
  std::shared_ptr<std::vector<int32_t>> heard = std::make_shared<std::vector<int32_t>>();
  std::unique_ptr<TokenConstraintState> start() const override {
    auto s = std::make_unique<ScriptState>();
    s->script = script;
    s->heard = heard;
    return s;
  }
};

// The edits the sampler gets for the one sequence (sample_batch merges the constraint's bans).
std::vector<LogitEdit> edits_of(const ScheduledSeq& s, int32_t vocab_size) {
  return sample_batch(std::span<const ScheduledSeq>(&s, 1), vocab_size).edits;
}
const LogitEdit* edit_of(const std::vector<LogitEdit>& edits, int32_t token) {
  for (const LogitEdit& e : edits) {
    if (e.token == token) return &e;
  }
  return nullptr;
}
bool banned(const std::vector<LogitEdit>& edits, int32_t token) {
  const LogitEdit* e = edit_of(edits, token);
  return e != nullptr && e->banned;
}
const ScheduledSeq& only(const ScheduledStep& step) {
  REQUIRE(step.decode.seqs.size() + step.prefill.seqs.size() == 1);
  return step.decode.seqs.empty() ? step.prefill.seqs[0] : step.decode.seqs[0];
}

}  // namespace

TEST_CASE("scheduler: a constraint's bans, the end tokens held back until it may end, logit_bias kept") {
  SchedulerConfig c;
  c.max_num_seqs = 4;
  c.max_batched_tokens = 64;
  c.max_context = 64;
  c.vocab_size = 40;
  c.eos_token_ids = {0};
  Scheduler s(c, BlockManager(16, 4));
  auto script = std::make_shared<Script>();
  script->script = {3, 4};
  Request r;
  r.id = 1;
  r.prompt = {5, 6, 7};
  r.params.temperature = 0.0f;
  r.params.max_tokens = 10;
  r.params.stop_token_ids = {9, 0};  // a chat's stop tokens repeat EOS
  r.params.logit_bias = {{4, 1.5f}, {20, -2.0f}};
  r.params.constraint = script;
  s.add(r);

  for (int32_t expect : {3, 4}) {
    const ScheduledStep step = s.schedule();
    const ScheduledSeq& q = only(step);
    REQUIRE(q.samples);
    CHECK(q.constraint != nullptr);
    const std::vector<LogitEdit> edits = edits_of(q, c.vocab_size);
    CHECK(std::is_sorted(edits.begin(), edits.end(), [](const LogitEdit& a, const LogitEdit& b) { return a.token < b.token; }));
    CHECK(std::adjacent_find(edits.begin(), edits.end(), [](const LogitEdit& a, const LogitEdit& b) {
            return a.token == b.token;
          }) == edits.end());  // one edit a token
    // One edit a token: a ban for every one but `expect`, which keeps its own bias edit if it has one.
    CHECK(edits.size() == static_cast<size_t>(c.vocab_size - 1 + (expect == 4 ? 1 : 0)));
    CHECK_FALSE(banned(edits, expect));
    CHECK(banned(edits, 0));  // EOS: the text may not end yet
    CHECK(banned(edits, 9));  // nor the stop token
    CHECK(banned(edits, 20));
    CHECK(edit_of(edits, 20)->bias == -2.0f);  // the request's own edit, banned on top
    if (expect == 4) {
      CHECK(edit_of(edits, 4)->bias == 1.5f);
      CHECK_FALSE(edit_of(edits, 4)->banned);
    }
    const auto events = s.on_step_done(step, std::vector<SampleOutput>{SampleOutput{expect, 0.0f, kSampleOk}});
    REQUIRE(events.size() == 1);
    CHECK_FALSE(events[0].finished);
  }
  CHECK(*script->heard == std::vector<int32_t>{3, 4});

  // The script is done: only the end tokens remain.
  const ScheduledStep step = s.schedule();
  const std::vector<LogitEdit> edits = edits_of(only(step), c.vocab_size);
  CHECK_FALSE(banned(edits, 0));
  CHECK_FALSE(banned(edits, 9));
  CHECK(banned(edits, 3));
  CHECK(banned(edits, 4));
  const auto events = s.on_step_done(step, std::vector<SampleOutput>{SampleOutput{9, 0.0f, kSampleOk}});
  REQUIRE(events.size() == 1);
  CHECK(events[0].finished);
  CHECK(events[0].reason == FinishReason::StopToken);
  CHECK(*script->heard == std::vector<int32_t>{3, 4});  // the stop token is not the constraint's text
}

TEST_CASE("scheduler: structured output and min_tokens are refused together") {
  SchedulerConfig c;
  c.max_context = 64;
  c.max_batched_tokens = 256;
  c.vocab_size = 40;
  c.eos_token_ids = {0};
  Scheduler s(c, BlockManager(16, 4));
  Request r;
  r.id = 1;
  r.prompt = {5};
  r.params.max_tokens = 10;
  r.params.min_tokens = 2;
  r.params.constraint = std::make_shared<Script>();
  CHECK_THROWS_WITH(s.add(r), Catch::Contains("min_tokens") && Catch::Contains("structured output"));
}
