#include "runtime/serving/sampling_params.hpp"

#include <atomic>
#include <cmath>
#include <random>

#include "runtime/core/error.hpp"
#include "runtime/core/hash.hpp"

namespace kiln {

void check_stop_strings(const std::vector<std::string>& stop) {
  if (stop.size() > kMaxStopStrings) {
    fail("sampling parameter stop holds ", stop.size(), " strings: expected at most ", kMaxStopStrings);
  }
  size_t bytes = 0;
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) fail("sampling parameter stop[", i, "] is empty: expected a non-empty string");
    bytes += stop[i].size();
  }
  if (bytes > kMaxStopBytes) {
    fail("sampling parameter stop holds ", bytes, " bytes of strings: expected at most ", kMaxStopBytes, " in all");
  }
}

void SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    fail("sampling parameter temperature = ", temperature, ": expected a finite value >= 0 (0 = greedy)");
  }
  if (top_k < 0) fail("sampling parameter top_k = ", top_k, ": expected >= 0 (0 = off)");
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    fail("sampling parameter top_p = ", top_p, ": expected a value in (0, 1] (1 = off)");
  }
  if (!(min_p >= 0.0f && min_p < 1.0f)) {
    fail("sampling parameter min_p = ", min_p, ": expected a value in [0, 1) (0 = off)");
  }
  if (max_tokens <= 0) fail("sampling parameter max_tokens = ", max_tokens, ": expected > 0");
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs) {
    fail("sampling parameter top_logprobs = ", top_logprobs, ": expected a value in [0, ", kMaxTopLogprobs, "]");
  }
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > kMaxTopLogprobs)) {
    fail("sampling parameter prompt_logprobs = ", *prompt_logprobs, ": expected a value in [0, ", kMaxTopLogprobs, "]");
  }
  if (min_tokens < 0 || min_tokens > max_tokens) {
    fail("sampling parameter min_tokens = ", min_tokens, ": expected a value in [0, max_tokens = ", max_tokens, "]");
  }
  if (constraint && min_tokens > 0) {
    fail("sampling parameter min_tokens = ", min_tokens, " cannot be combined with structured output: the format decides "
         "where the text ends");
  }
  if (constraint && ignore_eos) {
    // EOS would be offered where the format may end, sampled, and then neither end the text nor
    // be part of the format.
    fail("sampling parameter ignore_eos cannot be combined with structured output: the format decides where the text "
         "ends");
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    fail("sampling parameter presence_penalty = ", presence_penalty, ": expected a value in [-2, 2]");
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    fail("sampling parameter frequency_penalty = ", frequency_penalty, ": expected a value in [-2, 2]");
  }
  if (!(repetition_penalty > 0.0f && std::isfinite(repetition_penalty))) {
    fail("sampling parameter repetition_penalty = ", repetition_penalty, ": expected a finite value > 0 (1 = off)");
  }
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0) fail("sampling parameter logit_bias: token id ", token, ": expected a token id >= 0");
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      fail("sampling parameter logit_bias[", token, "] = ", bias, ": expected a value in [-100, 100]");
    }
  }
  for (size_t w = 0; w < bad_words_ids.size(); ++w) {
    if (bad_words_ids[w].empty()) fail("sampling parameter bad_words[", w, "]: a word of no tokens");
    for (int32_t id : bad_words_ids[w]) {
      if (id < 0) fail("sampling parameter bad_words[", w, "]: token id ", id, ": expected a token id >= 0");
    }
  }
  for (size_t i = 0; i < allowed_token_ids.size(); ++i) {
    if (allowed_token_ids[i] < 0) {
      fail("sampling parameter allowed_token_ids[", i, "] = ", allowed_token_ids[i], ": expected a token id >= 0");
    }
  }
  if (!bad_words_ids.empty() && (constraint || !allowed_token_ids.empty())) {
    // A bad word could ban every token the mask allows: the sampler would then pick among banned ones.
    fail("sampling parameter bad_words cannot be combined with structured output or allowed_token_ids");
  }
  if (constraint && !allowed_token_ids.empty()) {
    fail("sampling parameter allowed_token_ids cannot be combined with structured output: the format decides which "
         "tokens may come");
  }
  check_stop_strings(stop);
  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    if (stop_token_ids[i] < 0) {
      fail("sampling parameter stop_token_ids[", i, "] = ", stop_token_ids[i], ": expected a token id >= 0");
    }
  }
}

uint64_t draw_request_seed() {
  // splitmix64 over a counter that starts at a random point: every call gets a well-mixed, distinct
  // value, with no lock.
  static std::atomic<uint64_t> state{(static_cast<uint64_t>(std::random_device{}()) << 32) ^
                                     std::random_device{}()};
  return mix64(state.fetch_add(kGoldenGamma, std::memory_order_relaxed) + kGoldenGamma);
}

SamplerRow make_sampler_row(const SamplingParams& params, uint64_t seed, uint64_t counter) {
  SamplerRow row;
  row.temperature = params.temperature;
  row.top_k = params.top_k;
  row.top_p = params.top_p;
  row.min_p = params.min_p;
  row.seed = seed;
  row.counter = counter;
  row.want_logprob = params.logprobs ? 1 : 0;
  row.top_logprobs = params.top_logprobs;
  return row;
}

}  // namespace kiln
