// CPU reference sampler: the definition in sampling_math.hpp, written plainly. It is the sampler of
// the CPU backend and the oracle the CUDA sampler is tested against.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/serving/sample_batch.hpp"
#include "runtime/serving/sampling_math.hpp"

namespace kiln {

// How a sampled row's draw fell, for tests and diagnostics (meaningful for non-greedy rows only).
struct SampleTrace {
  uint32_t threshold_key = 0;  // kept set = {i : key_i >= threshold_key}
  uint64_t total_mass = 0;     // Σ mass over the whole row
  uint64_t kept_mass = 0;      // Σ mass over the kept set
  uint64_t target = 0;         // the draw, in [0, kept_mass)
  uint64_t mass_before = 0;    // kept mass of ids below the chosen token
  uint64_t mass_through = 0;   // ... including the chosen token (mass_before <= target < mass_through)
};

// One row of V logits. Throws kiln::Error when the row is empty or larger than kMaxSamplerVocab.
SampleOutput sample_row_cpu(std::span<const float> logits, const SamplerRow& row,
                            SampleTrace* trace = nullptr);

// Rows of a [rows.size(), vocab_size] row-major logits matrix.
std::vector<SampleOutput> sample_cpu(std::span<const float> logits, int32_t vocab_size,
                                     std::span<const SamplerRow> rows);

// A step's rows with their logit edits and logprobs (sample_batch.hpp). `logits` is not changed.
SampleResult sample_batch_cpu(std::span<const float> logits, int32_t vocab_size, const SampleBatch& batch);

// Raw logprobs of given tokens, one per row of a [tokens.size(), vocab] matrix, with each row's
// top_n (outputs[i].logprob, row_top(i, top_n)).
SampleResult logprobs_cpu(std::span<const float> logits, int32_t vocab_size, std::span<const int32_t> tokens, int32_t top_n);

// The raw log-probability of `token` and the n most likely tokens of a finite row.
float token_logprob_cpu(std::span<const float> logits, int32_t token);
std::vector<TokenLogprob> top_logprobs_cpu(std::span<const float> logits, int32_t n);

}  // namespace kiln
