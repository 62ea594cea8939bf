// A request as the caller submits it, and the sequence the scheduler serves it with.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/serving/request_id.hpp"
#include "runtime/serving/sampling_params.hpp"

namespace kiln {

struct Request {
  RequestId id = 0;              // unique among the scheduler's unfinished requests
  std::vector<int32_t> prompt;   // token ids, non-empty
  SamplingParams params;
  // Keep the logits of every prompt position (--dump-logits, prompt logprobs). Such a request
  // takes no pages from the prefix cache: every prompt row must run.
  bool prompt_logits = false;
};

enum class SequenceStatus { Waiting, Running, Swapped, Finished };

enum class FinishReason {
  None,
  Eos,         // generated one of the model's EOS tokens (and ignore_eos was off)
  StopToken,   // generated one of params.stop_token_ids
  MaxTokens,   // generated params.max_tokens tokens
  MaxContext,  // reached the model's max context
  KvPoolFull,  // filled the whole KV pool, which is smaller than the model's max context
  BadLogits,   // the model produced NaN or ±inf logits for this sequence
  StopString,  // the output text reached one of params.stop (found after detokenizing)
  Aborted,     // the caller withdrew the request (a client went away, the server stops)
};

constexpr std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::None: return "none";
    case FinishReason::Eos: return "eos";
    case FinishReason::StopToken: return "stop_token";
    case FinishReason::MaxTokens: return "max_tokens";
    case FinishReason::MaxContext: return "max_context";
    case FinishReason::KvPoolFull: return "kv_pool_full";
    case FinishReason::BadLogits: return "bad_logits";
    case FinishReason::StopString: return "stop_string";
    case FinishReason::Aborted: return "aborted";
  }
  return "unknown";
}

struct Sequence {
  RequestId id = 0;
  uint64_t arrival = 0;           // add() order: the scheduler is first come, first served
  std::vector<int32_t> tokens;    // prompt, then generated tokens
  int32_t num_prompt_tokens = 0;
  // Leading tokens whose KV is in the cache. A preemption that swaps the KV out to host memory
  // keeps it (host_pages hold it meanwhile); one that cannot resets it to 0: the sequence then
  // recomputes its prompt (prefill) and replays its generated tokens (decodes), helped by the
  // prefix cache, when it is admitted again.
  int32_t num_computed = 0;
  std::vector<int32_t> host_pages;  // Swapped: the host swap pages of its computed tokens' KV, in order
  SamplingParams params;
  uint64_t seed = 0;              // params.seed, or one drawn at add()
  SequenceStatus status = SequenceStatus::Waiting;
  FinishReason finish_reason = FinishReason::None;
  std::vector<float> logprobs;    // one per generated token when params.logprobs
  // For the logit edits (sample_batch.hpp), kept only when the params need them: each generated
  // token's count, and the prompt's distinct tokens (repetition penalty).
  std::vector<std::pair<int32_t, int32_t>> output_counts;  // sorted by token
  std::vector<int32_t> prompt_set;                          // sorted
  int32_t num_cached_prompt_tokens = 0;  // prefix-cache hit at the first admission
  int32_t num_preemptions = 0;
  bool admitted_before = false;
  bool prompt_logits = false;     // Request::prompt_logits
  // Where the text stands in params.constraint (structured output); null without one.
  std::unique_ptr<TokenConstraintState> constraint;
  std::vector<TokenMaskWord> allowed_mask;  // params.allowed_token_ids as a mask; empty: none

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_generated() const { return num_tokens() - num_prompt_tokens; }
  // Tokens to feed before the sequence samples again: 1 for a decode, more while prefilling.
  int32_t num_uncomputed() const { return num_tokens() - num_computed; }
};

}  // namespace kiln
