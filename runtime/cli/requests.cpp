#include "runtime/cli/requests.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <charconv>
#include <map>
#include <set>

#include "runtime/core/error.hpp"

namespace kiln {

namespace {

using nlohmann::json;

// Text -> ids; chat text is rendered with the model's template first and its end-of-turn tokens
// become stop tokens.
struct Encoder {
  const ModelInfo& model;
  const ModelSetup& setup;

  const Tokenizer& need_tokenizer(const char* what) const {
    if (!setup.tokenizer) {
      fail(what, " needs a tokenizer: give -m with a tokenizer.json, a .gguf, or --tokenizer (or use prompt ids)");
    }
    return *setup.tokenizer;
  }

  std::vector<int32_t> text(const std::string& prompt) const {
    const Tokenizer& t = need_tokenizer("a text prompt");
    return t.encode(prompt, t.add_bos_by_default());
  }

  std::vector<int32_t> chat_turn(const std::string& user, const std::string& system, std::vector<int32_t>& stops) const {
    const Tokenizer& t = need_tokenizer("--chat");
    if (!setup.chat_template) fail(model.name, " has no chat template (config chat_template: none, and none in the tokenizer files); use --prompt");
    nlohmann::json messages = nlohmann::json::array();
    if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
    messages.push_back({{"role", "user"}, {"content", user}});
    for (int32_t id : setup.chat_stop_ids) stops.push_back(id);
    // The template writes the BOS and other special tokens as text.
    return t.encode(setup.chat_template->render(messages, true), /*add_bos=*/false);
  }
};

void check_ids(const std::vector<int32_t>& ids, const ModelInfo& model, const char* what) {
  if (ids.empty()) fail(what, " is empty");
  for (int32_t id : ids) {
    if (id < 0 || id >= model.vocab_size) fail(what, ": token id ", id, " is outside the vocabulary (0..", model.vocab_size - 1, ")");
  }
}

// One JSONL line: exactly one of prompt / chat / prompt_ids, plus optional sampling fields.
Request parse_line(const json& j, const CliOptions& o, const Encoder& enc, const SamplingParams& defaults,
                   std::string& user_id) {
  static const std::set<std::string> kFields = {
      "id", "prompt", "chat", "system", "prompt_ids", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
      "stop", "stop_token_ids", "include_stop_str_in_output", "ignore_eos", "logprobs", "top_logprobs", "min_tokens",
      "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "prompt_logprobs"};
  if (!j.is_object()) fail("expected a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!kFields.count(it.key())) fail("unknown field '", it.key(), "'");
  }
  auto get = [&](const char* key, auto fallback) {
    using T = decltype(fallback);
    if (!j.contains(key)) return fallback;
    try {
      return j.at(key).get<T>();
    } catch (const json::exception&) {
      fail("field '", key, "' has the wrong type: ", j.at(key).dump());
    }
  };
  if (j.contains("id")) user_id = j.at("id").is_string() ? j.at("id").get<std::string>() : j.at("id").dump();

  Request r;
  r.params = defaults;
  const int sources = j.contains("prompt") + j.contains("chat") + j.contains("prompt_ids");
  if (sources != 1) fail("give exactly one of \"prompt\", \"chat\", \"prompt_ids\"");
  if (j.contains("prompt")) r.prompt = enc.text(get("prompt", std::string()));
  if (j.contains("chat")) {
    r.prompt = enc.chat_turn(get("chat", std::string()), get("system", o.system), r.params.stop_token_ids);
  }
  if (j.contains("prompt_ids")) {
    r.prompt = get("prompt_ids", std::vector<int32_t>());
    check_ids(r.prompt, enc.model, "prompt_ids");
  }
  r.params.max_tokens = get("max_tokens", r.params.max_tokens);
  r.params.temperature = get("temperature", r.params.temperature);
  r.params.top_p = get("top_p", r.params.top_p);
  r.params.top_k = get("top_k", r.params.top_k);
  r.params.min_p = get("min_p", r.params.min_p);
  if (j.contains("seed")) r.params.seed = get("seed", uint64_t{0});
  for (int32_t id : get("stop_token_ids", std::vector<int32_t>())) r.params.stop_token_ids.push_back(id);
  r.params.ignore_eos = get("ignore_eos", r.params.ignore_eos);
  r.params.logprobs = get("logprobs", r.params.logprobs);
  r.params.top_logprobs = get("top_logprobs", r.params.top_logprobs);
  if (r.params.top_logprobs > 0) r.params.logprobs = true;
  r.params.min_tokens = get("min_tokens", r.params.min_tokens);
  if (j.contains("prompt_logprobs")) r.params.prompt_logprobs = get("prompt_logprobs", int32_t{0});
  r.params.presence_penalty = get("presence_penalty", r.params.presence_penalty);
  r.params.frequency_penalty = get("frequency_penalty", r.params.frequency_penalty);
  r.params.repetition_penalty = get("repetition_penalty", r.params.repetition_penalty);
  r.params.include_stop_str_in_output = get("include_stop_str_in_output", r.params.include_stop_str_in_output);
  if (j.contains("stop")) {
    r.params.stop = j.at("stop").is_string() ? std::vector<std::string>{j.at("stop").get<std::string>()}
                                             : get("stop", std::vector<std::string>());
  }
  for (const auto& [token, bias] : get("logit_bias", std::map<std::string, float>())) {
    int32_t id = -1;
    const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), id);
    if (ec != std::errc() || ptr != token.data() + token.size()) fail("logit_bias key '", token, "' is not a token id");
    r.params.logit_bias.emplace_back(id, bias);
  }
  r.params.validate();
  return r;
}

}  // namespace

std::vector<PromptJob> build_jobs(const CliOptions& o, const ModelInfo& model, const ModelSetup& setup,
                                  const SamplingParams& defaults) {
  const Encoder enc{model, setup};
  std::vector<PromptJob> jobs;
  if (o.prompts_file.empty()) {
    PromptJob job;
    job.request.params = defaults;
    if (!o.prompt_ids.empty()) job.request.prompt = o.prompt_ids;
    if (!o.prompt.empty()) job.request.prompt = enc.text(o.prompt);
    if (!o.chat.empty()) job.request.prompt = enc.chat_turn(o.chat, o.system, job.request.params.stop_token_ids);
    check_ids(job.request.prompt, model, "the prompt");
    if (o.seed) job.request.params.seed = *o.seed;
    job.request.params.validate();
    jobs.push_back(std::move(job));
    return jobs;
  }

  std::ifstream in(o.prompts_file);
  if (!in) fail(o.prompts_file, ": cannot read the file");
  std::string text;
  for (int32_t line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are allowed
    PromptJob job;
    job.line = line;
    try {
      job.request = parse_line(json::parse(text), o, enc, defaults, job.user_id);
      if (!job.request.params.seed && o.seed) job.request.params.seed = *o.seed + static_cast<uint64_t>(jobs.size());
    } catch (const json::parse_error& e) {
      job.error = o.prompts_file + ":" + std::to_string(line) + ": not valid JSON (" + e.what() + ")";
    } catch (const Error& e) {
      job.error = o.prompts_file + ":" + std::to_string(line) + ": " + e.what();
    }
    jobs.push_back(std::move(job));
  }
  if (jobs.empty()) fail(o.prompts_file, ": no requests in the file");
  return jobs;
}

}  // namespace kiln
