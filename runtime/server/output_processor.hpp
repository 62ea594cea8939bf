// What a request's generated tokens become for its client: text deltas (incremental detokenizing),
// stop strings (held back while they could still match, never emitted unless
// include_stop_str_in_output), the end-of-turn token's text dropped, and the per-token logprobs.
// One per request, fed the engine's TokenEvents in order; used by the server, the chat REPL and
// the batch CLI alike.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/server/stop_matcher.hpp"
#include "runtime/serving/scheduler.hpp"
#include "runtime/tokenizer/stream_decoder.hpp"

namespace kiln {

struct OutputDelta {
  std::string text;                                   // new text, valid UTF-8 (empty without a tokenizer)
  std::vector<int32_t> token_ids;                     // the tokens generated since the last delta
  std::vector<float> logprobs;                        // per token, when params.logprobs
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // per token, when params.top_logprobs > 0
  std::vector<PromptTokenLogprob> prompt_logprobs;    // the first delta's, when params.prompt_logprobs
  bool finished = false;
  FinishReason reason = FinishReason::None;
  std::string stop_string;  // the stop string that ended the request (reason StopString)
  int32_t stop_token = -1;  // the stop token that ended it (reason StopToken)
};

class OutputProcessor {
 public:
  // tokenizer may be null (token ids only): then params.stop must be empty.
  OutputProcessor(const Tokenizer* tokenizer, const SamplingParams& params);

  // The delta for one event. A delta finished with reason StopString means the engine does not
  // know yet: the caller aborts the request there. Events after the finish give empty deltas.
  OutputDelta push(const TokenEvent& event);

  bool finished() const { return finished_; }
  int32_t num_tokens() const { return num_tokens_; }  // generated tokens so far, stop token included
  const std::string& text() const { return text_; }   // everything emitted so far

 private:
  // Feeds pending_'s bytes from fed_ on to the stop matchers; the stop string whose first
  // occurrence in pending_ starts first (`at`: where), or null.
  const StopMatcher* match_stops(size_t& at);
  // Moves what can no longer be part of a stop string from pending_ into `out`.
  void release(OutputDelta& out, bool final);

  SamplingParams params_;
  std::optional<StreamDecoder> decoder_;
  std::vector<StopMatcher> stops_;  // one per params.stop
  std::string pending_;  // decoded text not emitted yet (a possible stop-string prefix)
  size_t fed_ = 0;       // bytes of pending_ the stop matchers have seen
  std::string text_;
  int32_t num_tokens_ = 0;
  int32_t vocab_size_ = 0;
  bool finished_ = false;
};

// OpenAI's finish_reason for an engine finish reason: "stop", "length", "abort" or "error".
const char* openai_finish_reason(FinishReason reason);

}  // namespace kiln
