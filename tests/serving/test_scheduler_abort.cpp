// Scheduler::abort: a waiting or running request leaves at once, its pages back in the pool, and
// the others go on unchanged.
#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/serving/scheduler.hpp"

using namespace kiln;

namespace {

Scheduler make_scheduler() {
  SchedulerConfig c;
  c.max_num_seqs = 1;  // one runs, the other waits
  c.max_batched_tokens = 16;
  c.max_context = 64;
  c.vocab_size = 100;
  c.eos_token_ids = {0};
  return Scheduler(c, BlockManager(16, 4));
}

Request request(RequestId id) {
  Request r;
  r.id = id;
  r.prompt = std::vector<int32_t>(10);
  std::iota(r.prompt.begin(), r.prompt.end(), 1 + static_cast<int32_t>(id) * 10);
  r.params.temperature = 0.0f;
  r.params.max_tokens = 8;
  return r;
}

std::vector<SampleOutput> samples_for(const ScheduledStep& step) {
  return std::vector<SampleOutput>(step.num_samples(), SampleOutput{50, 0.0f, kSampleOk});
}

}  // namespace

TEST_CASE("abort frees a running request's pages at once and finishes it with the given reason") {
  Scheduler s = make_scheduler();
  s.add(request(1));
  s.add(request(2));
  const ScheduledStep step = s.schedule();
  s.on_step_done(step, samples_for(step));
  REQUIRE(s.num_running() == 1);
  REQUIRE(s.num_waiting() == 1);
  CHECK(s.blocks().stats().pages_in_use == 3);  // 11 tokens in pages of 4

  CHECK(s.abort(1, FinishReason::Aborted));
  CHECK(s.blocks().stats().pages_in_use == 0);
  CHECK(s.num_running() == 0);
  const std::vector<FinishedRequest> done = s.take_finished();
  REQUIRE(done.size() == 1);
  CHECK(done[0].id == 1);
  CHECK(done[0].reason == FinishReason::Aborted);
  CHECK(done[0].output_tokens == std::vector<int32_t>{50});

  // The waiting one is admitted next and runs to completion.
  while (s.has_unfinished()) {
    const ScheduledStep next = s.schedule();
    s.on_step_done(next, samples_for(next));
  }
  const std::vector<FinishedRequest> rest = s.take_finished();
  REQUIRE(rest.size() == 1);
  CHECK(rest[0].id == 2);
  CHECK(rest[0].reason == FinishReason::MaxTokens);
}

TEST_CASE("abort of a waiting request, of an unknown id, and between schedule and on_step_done") {
  Scheduler s = make_scheduler();
  s.add(request(1));
  s.add(request(2));
  CHECK(s.abort(2, FinishReason::StopString));
  CHECK(s.num_waiting() == 1);
  CHECK_FALSE(s.abort(2, FinishReason::Aborted));
  CHECK_FALSE(s.abort(99, FinishReason::Aborted));
  const ScheduledStep step = s.schedule();
  CHECK_THROWS_AS(s.abort(1, FinishReason::Aborted), Error);
  s.on_step_done(step, samples_for(step));
  CHECK(s.abort(1, FinishReason::Aborted));
  CHECK_FALSE(s.has_unfinished());
  CHECK(s.take_finished().size() == 2);
}
