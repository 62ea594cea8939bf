#include "runtime/cuda/op_timeline.hpp"

#include <cstring>

#include "runtime/core/error.hpp"
#include "runtime/cuda/check.hpp"

namespace kiln::cuda {

OpTimeline::OpTimeline() { KILN_CUDA(cudaEventCreate(&start_)); }

OpTimeline::~OpTimeline() {
  cudaEventDestroy(start_);
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void OpTimeline::start(cudaStream_t stream) {
  next_ = 0;
  KILN_CUDA(cudaEventRecord(start_, stream));
}

void OpTimeline::mark(const char* op, OpReads reads, int64_t bytes, cudaStream_t stream) {
  if (next_ == events_.size()) {
    cudaEvent_t e;
    KILN_CUDA(cudaEventCreate(&e));
    events_.push_back(e);
    marks_.push_back({op, reads, bytes});
  } else if (std::strcmp(marks_[next_].op, op) != 0) {
    fail("internal: decode op ", next_, " is ", op, " here and ", marks_[next_].op, " in an earlier decode");
  }
  // Under capture an event record is a dependency between streams unless it is marked external;
  // external, it becomes a node that records the event at every replay.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  KILN_CUDA(cudaStreamIsCapturing(stream, &capture));
  if (capture == cudaStreamCaptureStatusActive) {
    KILN_CUDA(cudaEventRecordWithFlags(events_[next_], stream, cudaEventRecordExternal));
  } else {
    KILN_CUDA(cudaEventRecord(events_[next_], stream));
  }
  ++next_;
}

void OpTimeline::finish(cudaStream_t stream, const StepReads& reads, OpProfile& profile) {
  // An eager step marked every op again; a graph's replay marked none here (its nodes did).
  if (next_ != 0 && next_ != events_.size()) {
    fail("internal: a decode step marked ", next_, " ops where earlier ones marked ", events_.size());
  }
  KILN_CUDA(cudaStreamSynchronize(stream));
  seconds_.assign(events_.size(), 0.0);
  cudaEvent_t previous = start_;
  for (size_t i = 0; i < events_.size(); ++i) {
    float ms = 0;
    KILN_CUDA(cudaEventElapsedTime(&ms, previous, events_[i]));
    seconds_[i] = 1e-3 * ms;
    previous = events_[i];
  }
  profile.add(marks_, seconds_, reads);
  next_ = 0;
}

}  // namespace kiln::cuda
