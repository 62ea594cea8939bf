// libFuzzer: an OpenAI API request body as the server takes it (runtime/server/openai_api.hpp):
// strict JSON, the model field, every sampling field, the prompt encoded or the chat rendered with
// a small ChatML tokenizer (261 tokens) for a model of 512 vocabulary rows; then, for a request
// that parses, each choice's text through OutputProcessor (stop strings) and its response objects,
// streamed and whole. The server answers bad input with ApiError (its status) or kiln::Error (400);
// anything else would be its 500 "internal error", a finding. Also checked: a parsed request is
// one the engine takes (ids in the vocabulary, params.validate()), and every text delta is UTF-8;
// a structured-output request's constraint is stepped along each choice's tokens.
// Input: one byte of options (bit 0: /v1/chat/completions, else /v1/completions; bit 1:
// --chat-special-tokens; bit 2: --tool-call-parser hermes, bit 3: llama3_json, both: pythonic; bit 4:
// --reasoning-parser qwen3, bit 5: deepseek_r1), then the body.
#include <nlohmann/json.hpp>

#include "runtime/chat/builtin_templates.hpp"
#include "runtime/core/strict_json.hpp"
#include "runtime/server/openai_api.hpp"
#include "runtime/tokenizer/utf8.hpp"
#include "tests/fuzz/fuzz_support.hpp"
#include "tests/support/chatml_tokenizer.hpp"
#include "tests/support/token_masks.hpp"

namespace {

struct Served {
  kiln::Tokenizer tokenizer;
  kiln::JinjaChatTemplate chat_template;
};

const Served& served() {
  static const Served s = [] {
    Served out{kiln::Tokenizer::from_tokenizer_json(
                   kiln::fuzz::write_input("tokenizer.json", kiln::test::chatml_tokenizer_json().dump())),
               kiln::JinjaChatTemplate(kiln::builtin_chat_template("chatml", ""), "", "<|endoftext|>",
                                       "the built-in chatml template")};
    return out;
  }();
  return s;
}

kiln::StructuredOutputs& structured() {
  static kiln::StructuredOutputs s(served().tokenizer);
  return s;
}

const kiln::ToolCallParser* tool_parser(uint8_t options) {
  static const auto hermes = kiln::ToolCallParser::make("hermes");
  static const auto llama3 = kiln::ToolCallParser::make("llama3_json");
  static const auto pythonic = kiln::ToolCallParser::make("pythonic");
  if ((options & 12) == 12) return pythonic.get();
  return options & 4 ? hermes.get() : options & 8 ? llama3.get() : nullptr;
}

const kiln::ReasoningParser* reasoning_parser(uint8_t options) {
  static const auto qwen3 = kiln::ReasoningParser::make("qwen3");
  static const auto r1 = kiln::ReasoningParser::make("deepseek_r1");
  return options & 16 ? qwen3.get() : options & 32 ? r1.get() : nullptr;
}

kiln::ApiModel api_model(bool special_tokens_in_text) {
  const Served& s = served();
  kiln::ApiModel m;
  m.name = "fuzz";
  m.tokenizer = &s.tokenizer;
  m.chat_template = &s.chat_template;
  m.chat_stop_ids = {257, 258};
  m.max_model_len = 512;
  m.vocab_size = 512;  // rows past the tokenizer's 261, as a padded embedding has
  m.special_tokens_in_text = special_tokens_in_text;
  m.structured = &structured();
  return m;
}

// A choice's generated tokens: the prompt's ids backwards (text that can meet the stop strings),
// an id past the tokenizer, then the end of turn.
std::vector<int32_t> generated(const std::vector<int32_t>& prompt, int32_t vocab_size) {
  std::vector<int32_t> ids(prompt.rbegin(), prompt.rend());
  if (ids.size() > 64) ids.resize(64);
  ids.push_back(vocab_size - 1);
  ids.push_back(257);
  return ids;
}

void serve(const kiln::ApiRequest& r, const kiln::ApiModel& m) {
  for (const auto& prompt : r.prompts) {
    for (int32_t id : prompt) {
      if (id < 0 || id >= m.vocab_size) __builtin_trap();
    }
  }
  r.params.validate();
  kiln::ResponseBuilder builder(r, m);
  std::vector<kiln::ChoiceText> whole;
  for (size_t p = 0; p < r.prompts.size(); ++p) {
    for (int32_t i = 0; i < r.n; ++i) {
      kiln::OutputProcessor output(m.tokenizer, r.params);
      kiln::ChoiceText all;
      all.index = static_cast<int32_t>(p) * r.n + i;
      if (r.stream && r.chat) builder.role_chunk(all.index);
      const std::vector<int32_t> ids = generated(r.prompts[p], m.vocab_size);
      if (r.params.constraint) {  // the scheduler's calls, along tokens the constraint may refuse
        auto state = r.params.constraint->start();
        bool can_end = false;
        for (int32_t id : ids) {
          try {
            kiln::test::allowed_tokens(*state, m.vocab_size, can_end);
          } catch (const kiln::Error&) {
            __builtin_trap();  // bits past the vocabulary
          }
          state->accept(id);
        }
      }
      for (size_t t = 0; t < ids.size() && !output.finished(); ++t) {
        kiln::TokenEvent e;
        e.token = ids[t];
        e.logprob = -1.0f;
        for (int32_t k = 0; k < r.params.top_logprobs; ++k) e.top_logprobs.push_back({m.vocab_size - 1 - k, -2.0f});
        if (t + 1 == ids.size()) {
          e.finished = true;
          e.reason = kiln::FinishReason::StopToken;
        }
        const kiln::OutputDelta d = output.push(e);
        if (!kiln::utf8::is_valid(d.text)) __builtin_trap();
        kiln::ChoiceText delta;
        delta.index = all.index;
        delta.text = d.text;
        delta.token_ids = d.token_ids;
        delta.logprobs = d.logprobs;
        delta.top_logprobs = d.top_logprobs;
        if (d.finished) {
          delta.finish_reason = kiln::openai_finish_reason(d.reason);
          delta.stop_reason = d.reason == kiln::FinishReason::StopString ? nlohmann::json(d.stop_string) : nlohmann::json(nullptr);
        }
        if (r.stream) builder.chunk(delta);
        all.text += delta.text;
        all.token_ids.insert(all.token_ids.end(), delta.token_ids.begin(), delta.token_ids.end());
        all.logprobs.insert(all.logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
        all.top_logprobs.insert(all.top_logprobs.end(), delta.top_logprobs.begin(), delta.top_logprobs.end());
        all.finish_reason = delta.finish_reason;
        all.stop_reason = delta.stop_reason;
      }
      whole.push_back(std::move(all));
    }
  }
  const kiln::Usage usage{static_cast<int64_t>(r.prompts.size()), static_cast<int64_t>(whole.size()), 0};
  if (r.stream && r.include_usage) builder.usage_chunk(usage);
  // As the server writes it (invalid UTF-8 replaced rather than thrown on).
  builder.response(whole, usage).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  kiln::ApiModel model = api_model((data[0] & 2) != 0);
  model.tool_parser = tool_parser(data[0]);
  model.reasoning_parser = reasoning_parser(data[0]);
  model.think_tokens = kiln::ThinkTokens{259, 260};
  kiln::fuzz::expect_kiln_errors_only([&] {
    const nlohmann::json body = kiln::parse_json_strict(kiln::fuzz::as_text(data + 1, size - 1), "the request body");
    try {
      serve(chat ? kiln::parse_chat_request(body, model) : kiln::parse_completion_request(body, model), model);
    } catch (const kiln::ApiError&) {
      // a 4xx naming the field: the answer for a bad request
    }
  });
  return 0;
}
