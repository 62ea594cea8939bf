// Per-request sampling and stopping parameters (the vLLM SamplingParams subset kiln supports).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/serving/sampling_math.hpp"

namespace kiln {

struct SamplingParams {
  float temperature = 1.0f;  // >= 0; 0 (or below kGreedyTemperature): greedy
  int32_t top_k = 0;         // >= 0; 0: off
  float top_p = 1.0f;        // (0, 1]; 1: off
  float min_p = 0.0f;        // [0, 1); 0: off
  std::optional<uint64_t> seed;  // absent: draw_request_seed() at admission
  int32_t max_tokens = 16;       // > 0: generated tokens at most
  std::vector<int32_t> stop_token_ids;  // finish after generating any of these (kept in the output)
  bool ignore_eos = false;              // keep generating past the model's EOS tokens
  bool logprobs = false;                // return each generated token's log-probability

  // Throws kiln::Error naming the first field outside its range.
  void validate() const;
};

// A seed for a request that did not set one: distinct per call (process-wide, thread-safe), and
// different between runs of the program.
uint64_t draw_request_seed();

// The sampler's view of a request's next token: counter = how many tokens it has generated.
SamplerRow make_sampler_row(const SamplingParams& params, uint64_t seed, uint64_t counter);

}  // namespace kiln
