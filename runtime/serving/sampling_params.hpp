// Per-request sampling and stopping parameters: vLLM's SamplingParams (n is the caller's: one
// Request is one sequence; the server fans n out into n requests with seeds seed, seed+1, ...).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/serving/sampling_math.hpp"
#include "runtime/serving/token_constraint.hpp"

namespace kiln {

// Stop strings a request may give. Every one is followed over every generated token
// (OutputProcessor), and the server copies them into each of a request's choices (prompts × n, up
// to --max-waiting), so megabytes of them in one body would become gigabytes: 500,000 in a 6 MB
// body with n = 16 took 0.8 GB. OpenAI and TGI (by default) take 4, vLLM any number.
inline constexpr size_t kMaxStopStrings = 1024, kMaxStopBytes = 65536;
// Throws kiln::Error for an empty stop string, more than kMaxStopStrings, or more than
// kMaxStopBytes in all.
void check_stop_strings(const std::vector<std::string>& stop);

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
  int32_t top_logprobs = 0;             // [0, kMaxTopLogprobs]: also the N most likely tokens, per token
  // [0, kMaxTopLogprobs]: each prompt token's logprob (from the second on) and the N most likely
  // tokens at its position. Such a request takes no prefix-cache hits (vLLM: every prompt row's
  // logits are needed).
  std::optional<int32_t> prompt_logprobs;

  // Logit processing before sampling, in vLLM's order: logit_bias, min_tokens, then the penalties.
  int32_t min_tokens = 0;               // [0, max_tokens]: EOS and stop tokens banned before this many
  float presence_penalty = 0.0f;        // [-2, 2]: minus this for tokens already generated
  float frequency_penalty = 0.0f;       // [-2, 2]: minus this times the count of each generated token
  float repetition_penalty = 1.0f;      // > 0: tokens of the prompt or the output: x>0 ? x/r : x*r
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, bias in [-100, 100]) added to the logit
  // vLLM's bad_words, as token sequences: a one-token word is never sampled; a longer word's last
  // token is banned where the generated tokens end with the rest of it.
  std::vector<std::vector<int32_t>> bad_words_ids;
  // vLLM's allowed_token_ids: the only tokens that may be sampled (empty: any; EOS too only if
  // listed). Not with structured output.
  std::vector<int32_t> allowed_token_ids;

  // Text-level stopping, applied by the detokenizer (runtime/server/output_processor.hpp).
  std::vector<std::string> stop;        // finish when the text reaches one (not emitted)
  bool include_stop_str_in_output = false;  // emit the stop string (or stop token's text) too
  bool skip_special_tokens = true;      // special tokens' text is left out of the output

  // Structured output: the text must follow this (a JSON schema, a grammar, ...). Its end tokens
  // (EOS, stop_token_ids) are banned until the text may end there. Not with min_tokens or ignore_eos.
  std::shared_ptr<const TokenConstraint> constraint;

  bool has_penalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }

  // Throws kiln::Error naming the first field outside its range.
  void validate() const;
};

// A seed for a request that did not set one: distinct per call (process-wide, thread-safe), and
// different between runs of the program.
uint64_t draw_request_seed();

// The sampler's view of a request's next token: counter = how many tokens it has generated.
SamplerRow make_sampler_row(const SamplingParams& params, uint64_t seed, uint64_t counter);

}  // namespace kiln
