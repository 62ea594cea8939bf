// Runs the serving loop the way the engine will: schedule -> build_step_batch -> forward (the fake
// model) -> sample_cpu -> on_step_done.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "fake_model.hpp"
#include "runtime/serving/scheduler.hpp"

namespace kiln::testing {

// One full step; returns what was scheduled (empty when nothing could run).
ScheduledStep run_step(Scheduler& scheduler, FakeModel& model);

struct ServeResult {
  std::map<RequestId, FinishedRequest> finished;
  SchedulerStats stats;
  int64_t chunked_prefills = 0;  // prefill chunks that stopped short of sampling
  int64_t steps = 0;
};

// Adds requests[i] before step arrival_steps[i] (sorted ascending), runs until all finish.
// Throws on an empty step while requests are unfinished (the engine's rule: a wedged scheduler).
ServeResult serve(Scheduler& scheduler, FakeModel& model, const std::vector<Request>& requests,
                  const std::vector<int64_t>& arrival_steps);

// Serves one request alone, in a fresh scheduler and fake model of the given shape: the result that
// request must also get when served among others. Throws if it was preempted (alone it never
// should be).
FinishedRequest run_alone(const SchedulerConfig& cfg, int32_t num_pages, int32_t page_size, const Request& r,
                          int32_t vocab);

}  // namespace kiln::testing
