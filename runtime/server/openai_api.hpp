// The OpenAI API's requests and responses (/v1/completions, /v1/chat/completions), as vLLM serves
// them: JSON bodies parsed into engine requests with every field checked (a bad one is a 400 that
// names it), and the response objects and stream chunks built from the engine's deltas.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/chat/jinja_template.hpp"
#include "runtime/server/output_processor.hpp"
#include "runtime/server/reasoning_parser.hpp"
#include "runtime/server/tool_parser.hpp"
#include "runtime/serving/generation_defaults.hpp"
#include "runtime/serving/sampling_params.hpp"
#include "runtime/structured/after_reasoning.hpp"
#include "runtime/structured/structured_outputs.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace kiln {

// An error for the client: HTTP status and OpenAI's error object
// {"error": {"message", "type", "param", "code"}}.
struct ApiError : std::runtime_error {
  ApiError(int status, const std::string& message, std::string param = "")
      : std::runtime_error(message), status(status), param(std::move(param)) {}
  int status;
  std::string param;
};
nlohmann::json error_body(int status, const std::string& message, const std::string& param = "");

// What the server knows about its model, for parsing requests.
struct ApiModel {
  std::string name;                       // --served-model-name
  const Tokenizer* tokenizer = nullptr;   // null: token-id prompts only
  const JinjaChatTemplate* chat_template = nullptr;  // null: no chat endpoint
  std::vector<int32_t> chat_stop_ids;     // end-of-turn tokens of the template (and EOS)
  int32_t max_model_len = 0;
  int32_t vocab_size = 0;
  GenerationDefaults defaults;
  bool special_tokens_in_text = false;    // --chat-special-tokens: messages may spell control tokens
  int32_t max_choices = 1024;             // --max-waiting: completions (prompts × n) a request may ask for
  StructuredOutputs* structured = nullptr;  // null without a tokenizer: structured output refused
  // --tool-call-parser (with --enable-auto-tool-choice): tool_choice "auto" answers parsed for calls.
  const ToolCallParser* tool_parser = nullptr;
  // --reasoning-parser: chat answers' <think> blocks come back as reasoning_content, and structured
  // output starts after the block (when the vocabulary spells <think> and </think> as one token each).
  const ReasoningParser* reasoning_parser = nullptr;
  ThinkTokens think_tokens;
};

struct ApiRequest {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;   // stream_options.include_usage
  int32_t n = 1;
  bool echo = false;            // completions: prepend the prompt to the text
  int32_t logprobs = -1;        // completions: top-N per token (-1: none); chat: top_logprobs
  bool tokens_as_ids = false;   // vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:<id>"
  std::vector<std::vector<int32_t>> prompts;  // one per prompt (chat: one)
  std::vector<std::string> prompt_texts;      // for echo
  SamplingParams params;        // params.seed, if given, is choice 0's; choice i uses seed + i
  // Chat's tool_choice "required" or a named function: the answer is constrained to the calls'
  // JSON (params.constraint) and comes back as tool_calls, not content. parsed: tools with
  // tool_choice "auto" on a server with a --tool-call-parser: the calls the model writes in its own
  // format come back as tool_calls, the rest as content.
  enum class ToolChoice { text, named, required, parsed } tool_choice = ToolChoice::text;
  std::string tool_name;        // named: the function
};

// `raw`: the body's text, when there is one: a JSON schema's properties keep their order from it
// (nlohmann::json sorts an object's keys).
ApiRequest parse_completion_request(const nlohmann::json& body, const ApiModel& model, std::string_view raw = {});
ApiRequest parse_chat_request(const nlohmann::json& body, const ApiModel& model, std::string_view raw = {});
// The "model" field, when given, must name the served model (404 otherwise).
void check_model_field(const nlohmann::json& body, const ApiModel& model);

// One choice's accumulated result (non-streaming) or one delta (streaming).
struct ChoiceText {
  int32_t index = 0;
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  std::vector<PromptTokenLogprob> prompt_logprobs;  // prompt tokens 1.. (params.prompt_logprobs)
  const char* finish_reason = nullptr;  // null while running
  nlohmann::json stop_reason;            // null, the stop string, or the stop token id
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

class ResponseBuilder {
 public:
  ResponseBuilder(const ApiRequest& request, const ApiModel& model);
  // Streaming: "data: {...}\n\n" for one delta; the role chunk for chat's first delta of a choice.
  std::string chunk(const ChoiceText& delta);
  std::string role_chunk(int32_t index) const;
  std::string usage_chunk(const Usage& usage) const;
  // Non-streaming: the whole response.
  nlohmann::json response(const std::vector<ChoiceText>& choices, const Usage& usage) const;

 private:
  nlohmann::json logprobs_json(const ChoiceText& c, size_t text_offset) const;
  nlohmann::json prompt_logprobs_json(const std::vector<PromptTokenLogprob>& p) const;
  nlohmann::json chunk_base() const;
  // A finished choice's text as its calls: forced ones (named, required; nullopt when the text was
  // cut off) or the parser's (an empty list when the model wrote none).
  std::optional<std::vector<ToolCall>> tool_calls(const std::string& text, std::string* content) const;
  // A finished choice's answer (the text after any reasoning) as the message or delta fields it
  // stands for: tool_calls when it holds them, else content.
  nlohmann::json answer_fields(const std::string& text, bool delta) const;
  const char* finish_reason(const ChoiceText& c, const std::string& text) const;
  const ApiRequest& request_;
  const ApiModel& model_;
  std::string id_;
  int64_t created_;
  std::vector<size_t> text_offsets_;  // completions' logprobs.text_offset, per choice
  // Streamed chat answers that are parsed (tool calls, reasoning): each choice's text so far, how
  // much of its answer went out as content, and how far into the text its reasoning went out.
  std::vector<std::string> held_text_;
  std::vector<size_t> content_sent_, reasoning_sent_;
  // The logprobs (and prompt logprobs) of held deltas that sent nothing yet: they go out with the
  // choice's next chunk, so that a stream's logprobs add up to the whole answer's.
  std::vector<ChoiceText> held_logprobs_;
};

nlohmann::json usage_json(const Usage& usage);

}  // namespace kiln
