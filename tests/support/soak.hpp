// The serving soak of issue 13, shared by the CPU test (tests/hardening/test_soak.cpp) and the
// CUDA one (tests/serving/test_serving_gpu.cu, group "soak"): random requests of random lengths,
// sampling settings and seeds run together through a KV pool that holds only a few of them at
// once (so the scheduler preempts and recomputes), then each alone on a fresh engine with a pool to
// spare. Nothing is retried or smoothed over: every difference is reported.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/engine/backend.hpp"

namespace kiln::test {

struct SoakReport {
  int requests = 0;
  int finished = 0;             // distinct requests that finished in the shared run
  int finished_twice = 0;       // requests reported finished more than once
  int differing = 0;            // outputs (tokens, finish reason, logprobs) unlike running alone
  std::vector<std::string> differences;  // the first few, one line each
  int32_t pool_pages = 0;
  int64_t needed_pages = 0;     // all requests' pages together
  int64_t preemptions = 0;
  int preempted_requests = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t pages_in_use_after = 0;  // must be 0
  double seconds_together = 0, seconds_alone = 0;

  std::string summary() const;
};

// `make_backend(kv_pages)` makes a backend with that many KV pages (0: the backend's default, used
// for the runs alone); the same weights every time.
SoakReport run_soak(const ModelDef& model, int num_requests, uint32_t seed,
                    const std::function<std::unique_ptr<Backend>(int32_t kv_pages)>& make_backend);

}  // namespace kiln::test
