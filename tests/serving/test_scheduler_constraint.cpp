// Structured output in the scheduler (SamplingParams::constraint): the constraint's mask goes to
// the sampler beside the request's own logit edits (logit_bias kept), the end tokens (EOS,
// stop_token_ids) are masked until the constraint lets the text end and let through after, and the
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
#include "tests/support/token_masks.hpp"

using namespace kiln;

namespace {

// Allows script[k] at the k-th sample, then only the end.
struct ScriptState : TokenConstraintState {
  std::vector<int32_t> script;
  std::shared_ptr<std::vector<int32_t>> heard;
  size_t k = 0;
  void allowed(int32_t vocab_size, std::span<TokenMaskWord> mask, bool& can_end) override {
    std::fill(mask.begin(), mask.end(), TokenMaskWord{0});
    if (k < script.size() && script[k] < vocab_size) mask[script[k] / 64] |= TokenMaskWord{1} << (script[k] % 64);
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

// What the sampler gets for the one sequence: its edits and (sample_batch asks the constraint) its
// mask's allowed tokens.
SampleBatch batch_of(const ScheduledSeq& s, int32_t vocab_size) {
  return sample_batch(std::span<const ScheduledSeq>(&s, 1), vocab_size);
}
std::vector<int32_t> allowed_of(const SampleBatch& b, int32_t vocab_size) {
  REQUIRE(b.mask_rows == std::vector<int32_t>{0});
  return kiln::test::mask_tokens(b.row_mask(0, vocab_size), vocab_size);
}
const ScheduledSeq& only(const ScheduledStep& step) {
  REQUIRE(step.decode.seqs.size() + step.prefill.seqs.size() == 1);
  return step.decode.seqs.empty() ? step.prefill.seqs[0] : step.decode.seqs[0];
}

}  // namespace

TEST_CASE("scheduler: a constraint's mask, the end tokens held back until it may end, logit_bias kept") {
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
    const SampleBatch b = batch_of(q, c.vocab_size);
    // Only `expect`: not EOS (the text may not end yet), nor the stop token.
    CHECK(allowed_of(b, c.vocab_size) == std::vector<int32_t>{expect});
    // The request's own edits, as they are: the mask does the banning.
    REQUIRE(b.edits.size() == 2);
    CHECK(b.edits[0].token == 4);
    CHECK(b.edits[0].bias == 1.5f);
    CHECK(b.edits[1].token == 20);
    CHECK(b.edits[1].bias == -2.0f);
    CHECK_FALSE(b.edits[0].banned);
    const auto events = s.on_step_done(step, std::vector<SampleOutput>{SampleOutput{expect, 0.0f, kSampleOk}});
    REQUIRE(events.size() == 1);
    CHECK_FALSE(events[0].finished);
  }
  CHECK(*script->heard == std::vector<int32_t>{3, 4});

  // The script is done: only the end tokens remain.
  const ScheduledStep step = s.schedule();
  CHECK(allowed_of(batch_of(only(step), c.vocab_size), c.vocab_size) == std::vector<int32_t>{0, 9});
  const auto events = s.on_step_done(step, std::vector<SampleOutput>{SampleOutput{9, 0.0f, kSampleOk}});
  REQUIRE(events.size() == 1);
  CHECK(events[0].finished);
  CHECK(events[0].reason == FinishReason::StopToken);
  CHECK(*script->heard == std::vector<int32_t>{3, 4});  // the stop token is not the constraint's text
}

TEST_CASE("scheduler: allowed_token_ids as a mask, bad_words as bans that follow the generated tokens") {
  SchedulerConfig c;
  c.max_num_seqs = 4;
  c.max_batched_tokens = 64;
  c.max_context = 64;
  c.vocab_size = 70;  // past one mask word
  c.eos_token_ids = {0};
  Scheduler s(c, BlockManager(16, 4));
  Request r;
  r.id = 1;
  r.prompt = {5, 6};
  r.params.temperature = 0.0f;
  r.params.max_tokens = 10;
  r.params.allowed_token_ids = {3, 4, 65};
  s.add(r);
  ScheduledStep step = s.schedule();
  SampleBatch b = batch_of(only(step), c.vocab_size);
  CHECK(allowed_of(b, c.vocab_size) == std::vector<int32_t>{3, 4, 65});  // not EOS: it is not listed
  CHECK(b.edits.empty());
  s.on_step_done(step, std::vector<SampleOutput>{SampleOutput{4, 0.0f, kSampleOk}});
  CHECK(s.abort(1, FinishReason::Aborted));

  Request w = r;
  w.id = 2;
  w.params.allowed_token_ids.clear();
  w.params.bad_words_ids = {{4, 65}, {30}};
  s.add(w);
  step = s.schedule();
  b = batch_of(only(step), c.vocab_size);
  CHECK(b.mask_rows.empty());
  REQUIRE(b.edits.size() == 1);
  CHECK((b.edits[0].token == 30 && b.edits[0].banned));
  s.on_step_done(step, std::vector<SampleOutput>{SampleOutput{4, 0.0f, kSampleOk}});
  step = s.schedule();
  b = batch_of(only(step), c.vocab_size);
  REQUIRE(b.edits.size() == 2);  // after 4, the word "4 65" would end with 65
  CHECK((b.edits[0].token == 30 && b.edits[1].token == 65 && b.edits[1].banned));
  Request bad = r;
  bad.id = 3;
  bad.params.allowed_token_ids = {70};
  CHECK_THROWS_WITH(s.add(bad), Catch::Contains("allowed token 70"));
  bad.params.allowed_token_ids = {3};
  bad.params.bad_words_ids = {{3}};
  CHECK_THROWS_WITH(s.add(bad), Catch::Contains("bad_words cannot be combined"));
}

TEST_CASE("scheduler: structured output with min_tokens, ignore_eos or allowed_token_ids is refused") {
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
  r.params.min_tokens = 0;
  r.params.ignore_eos = true;
  CHECK_THROWS_WITH(s.add(r), Catch::Contains("ignore_eos") && Catch::Contains("structured output"));
  r.params.ignore_eos = false;
  r.params.allowed_token_ids = {3};
  CHECK_THROWS_WITH(s.add(r), Catch::Contains("allowed_token_ids") && Catch::Contains("structured output"));
}
