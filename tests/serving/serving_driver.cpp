#include "serving_driver.hpp"

#include "runtime/core/error.hpp"
#include "runtime/serving/sampler_cpu.hpp"
#include "runtime/serving/step_batch_builder.hpp"

namespace kiln::testing {

ScheduledStep run_step(Scheduler& scheduler, FakeModel& model) {
  ScheduledStep step = scheduler.schedule();
  if (step.empty()) return step;
  model.swap(step.swap_out, true);
  model.swap(step.swap_in, false);
  std::vector<SampleOutput> samples;
  for (const PhaseStep* phase : {&step.decode, &step.prefill}) {
    if (phase->empty()) continue;
    const StepBatch batch = build_step_batch(*phase, scheduler.blocks().page_size(), model.step_buffer(phase->phase));
    const std::vector<float> logits = model.forward(batch);
    const std::vector<SampleOutput> phase_samples =
        sample_cpu(std::span<const float>(logits).first(batch.num_samples * static_cast<size_t>(model.vocab_size())),
                   model.vocab_size(), sample_batch(phase->seqs, model.vocab_size()).rows);
    samples.insert(samples.end(), phase_samples.begin(), phase_samples.end());
  }
  scheduler.on_step_done(step, samples);
  return step;
}

ServeResult serve(Scheduler& scheduler, FakeModel& model, const std::vector<Request>& requests,
                  const std::vector<int64_t>& arrival_steps) {
  ServeResult result;
  size_t next = 0;
  while (next < requests.size() || scheduler.has_unfinished()) {
    while (next < requests.size() && arrival_steps[next] <= result.steps) scheduler.add(requests[next++]);
    const bool had_work = scheduler.has_unfinished();
    const ScheduledStep step = run_step(scheduler, model);
    // The engine cannot run an empty step either: with requests in hand, a step must do something.
    if (had_work && step.empty()) fail("serve: step ", result.steps, " is empty with unfinished requests");
    ++result.steps;
    for (const ScheduledSeq& s : step.prefill.seqs) {
      if (!s.samples) ++result.chunked_prefills;
    }
    for (FinishedRequest& f : scheduler.take_finished()) result.finished.emplace(f.id, std::move(f));
    if (result.steps > 100000) fail("serve: more than 100000 steps");
  }
  result.stats = scheduler.stats();
  return result;
}

FinishedRequest run_alone(const SchedulerConfig& cfg, int32_t num_pages, int32_t page_size, const Request& r,
                          int32_t vocab) {
  Scheduler alone(cfg, BlockManager(num_pages, page_size));
  FakeModel model(num_pages * page_size, page_size, vocab);
  ServeResult result = serve(alone, model, {r}, {0});
  if (result.stats.preemptions != 0) {
    fail("run_alone: request ", r.id, " was preempted ", result.stats.preemptions, " times while alone");
  }
  return std::move(result.finished.at(r.id));
}

}  // namespace kiln::testing
