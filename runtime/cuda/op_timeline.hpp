// --profile on the per-op decode path: a CUDA event after every op of the generated decode
// (CudaContext::mark), read back after the step. Works eagerly and inside captured graphs (the
// events become event-record nodes, re-recorded at every replay), so the profile times the graphs
// the benchmark runs. Costs one stream synchronization per step: a profiled run is not a timed one.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "runtime/core/op_profile.hpp"

namespace kiln::cuda {

class OpTimeline {
 public:
  OpTimeline();
  ~OpTimeline();
  OpTimeline(const OpTimeline&) = delete;
  OpTimeline& operator=(const OpTimeline&) = delete;

  // Before a decode sequence is captured into a graph: its marks start again from the first.
  void begin_capture() { next_ = 0; }
  // Before a decode step is launched (not under capture): the step's start.
  void start(cudaStream_t stream);
  // The generated decode, after each op. Every decode sequence (eager, or any graph's) marks the
  // same ops in the same order; a different one is an internal error.
  void mark(const char* op, OpReads reads, int64_t bytes, cudaStream_t stream);
  // After the step's launch: waits for it and adds each op's time to `profile`.
  void finish(cudaStream_t stream, const StepReads& reads, OpProfile& profile);

 private:
  cudaEvent_t start_ = nullptr;
  std::vector<cudaEvent_t> events_;  // one per mark of a step
  std::vector<OpMark> marks_;
  size_t next_ = 0;                  // marks made by the sequence being launched or captured
  std::vector<double> seconds_;
};

}  // namespace kiln::cuda
