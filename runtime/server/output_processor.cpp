#include "runtime/server/output_processor.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"

namespace kiln {

OutputProcessor::OutputProcessor(const Tokenizer* tokenizer, const SamplingParams& params) : params_(params) {
  if (tokenizer) {
    // Generated text continues the prompt: no SentencePiece dummy-prefix handling at its start.
    decoder_.emplace(*tokenizer, params.skip_special_tokens, /*at_sequence_start=*/false);
    vocab_size_ = static_cast<int32_t>(tokenizer->vocab_size());
  } else if (!params.stop.empty()) {
    fail("stop strings need a tokenizer (give --model with a tokenizer.json, --gguf, or --tokenizer)");
  }
  for (const std::string& stop : params.stop) stops_.emplace_back(stop);
}

const StopMatcher* OutputProcessor::match_stops(size_t& at) {
  const StopMatcher* first = nullptr;
  for (StopMatcher& m : stops_) {
    for (size_t i = fed_; i < pending_.size(); ++i) {
      if (!m.push(pending_[i])) continue;
      const size_t start = i + 1 - m.size();
      if (first == nullptr || start < at) {
        first = &m;
        at = start;
      }
      break;
    }
  }
  fed_ = pending_.size();
  return first;
}

OutputDelta OutputProcessor::push(const TokenEvent& e) {
  OutputDelta out;
  if (finished_) return out;
  out.prompt_logprobs = e.prompt_logprobs;
  if (e.token >= 0) {
    ++num_tokens_;
    out.token_ids.push_back(e.token);
    if (params_.logprobs) out.logprobs.push_back(e.logprob);
    if (params_.top_logprobs > 0) out.top_logprobs.push_back(e.top_logprobs);
    // The token that ended the turn (EOS, a stop token) is not part of the text unless asked for.
    const bool stop_token = e.finished && (e.reason == FinishReason::Eos || e.reason == FinishReason::StopToken);
    // Ids past the tokenizer's vocabulary (a model's padded embedding rows) have no text.
    if (decoder_ && (!stop_token || params_.include_stop_str_in_output) && e.token < vocab_size_) {
      pending_ += decoder_->push(e.token);
    }
    if (e.reason == FinishReason::StopToken) out.stop_token = e.token;
  }
  if (e.finished && decoder_) pending_ += decoder_->flush();

  // Stop strings count from min_tokens on (vLLM): earlier matches are plain text.
  const bool check_stops = !params_.stop.empty() && num_tokens_ >= params_.min_tokens;
  if (check_stops) {
    // The first occurrence in pending_: none ended in the bytes fed before (the request would have
    // finished), and a stop string cannot start inside a character of the valid UTF-8 pending_.
    size_t at = 0;
    if (const StopMatcher* matched = match_stops(at)) {
      out.text = pending_.substr(0, at + (params_.include_stop_str_in_output ? matched->size() : 0));
      pending_.clear();
      text_ += out.text;
      out.finished = finished_ = true;
      out.reason = FinishReason::StopString;
      out.stop_string = matched->stop();
      return out;
    }
  }
  release(out, e.finished || !check_stops);
  if (e.finished) {
    out.finished = finished_ = true;
    out.reason = e.reason;
  }
  return out;
}

void OutputProcessor::release(OutputDelta& out, bool final) {
  size_t keep = 0;  // the longest suffix of pending_ that a stop string starts with
  if (!final) {
    for (const StopMatcher& m : stops_) keep = std::max(keep, m.matched());
  } else {
    for (StopMatcher& m : stops_) m.reset();  // text emitted unexamined (before min_tokens) matches nothing later
  }
  out.text = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  fed_ = pending_.size();
  text_ += out.text;
}

const char* openai_finish_reason(FinishReason reason) {
  switch (reason) {
    case FinishReason::Eos:
    case FinishReason::StopToken:
    case FinishReason::StopString: return "stop";
    case FinishReason::MaxTokens:
    case FinishReason::MaxContext:
    case FinishReason::KvPoolFull: return "length";
    case FinishReason::Aborted: return "abort";
    case FinishReason::BadLogits:
    case FinishReason::None: return "error";
  }
  return "error";
}

}  // namespace kiln
