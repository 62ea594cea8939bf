#include "runtime/cli/requests.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/core/error.hpp"
#include "runtime/tokenizer/chat_template.hpp"

namespace kiln {

namespace {

using nlohmann::json;

// Text -> ids; chat text is rendered first and its end-of-turn tokens become stop tokens.
struct Encoder {
  const ModelInfo& model;
  const ChatSetup& chat;
  const Tokenizer* tokenizer;

  const Tokenizer& need_tokenizer(const char* what) const {
    if (!tokenizer) {
      fail(what, " needs a tokenizer: give --model with a tokenizer.json, --gguf, or --tokenizer (or use prompt ids)");
    }
    return *tokenizer;
  }

  std::vector<int32_t> text(const std::string& prompt) const {
    const Tokenizer& t = need_tokenizer("a text prompt");
    return t.encode(prompt, t.add_bos_by_default());
  }

  std::vector<int32_t> chat_turn(const std::string& user, const std::string& system, std::vector<int32_t>& stops) const {
    const Tokenizer& t = need_tokenizer("--chat");
    if (chat.format == "none") fail(model.name, " has no chat template (config chat_template: none); use --prompt");
    const ChatFormat format = parse_chat_format(chat.format);
    ChatOptions options;
    options.default_system = chat.default_system;
    const std::string rendered = render_chat(format, system, user, options);
    for (int32_t id : chat_stop_ids(format, t)) stops.push_back(id);
    return t.encode(rendered, !chat_renders_bos(format) && t.add_bos_by_default());
  }
};

SamplingParams default_params(const CliOptions& o) {
  SamplingParams p;
  p.max_tokens = o.max_tokens;
  p.temperature = o.temperature;
  p.top_p = o.top_p;
  p.top_k = o.top_k;
  p.min_p = o.min_p;
  p.ignore_eos = o.ignore_eos;
  p.logprobs = o.logprobs;
  return p;
}

void check_ids(const std::vector<int32_t>& ids, const ModelInfo& model, const char* what) {
  if (ids.empty()) fail(what, " is empty");
  for (int32_t id : ids) {
    if (id < 0 || id >= model.vocab_size) fail(what, ": token id ", id, " is outside the vocabulary (0..", model.vocab_size - 1, ")");
  }
}

// One JSONL line: exactly one of prompt / chat / prompt_ids, plus optional sampling fields.
Request parse_line(const json& j, const CliOptions& o, const Encoder& enc, std::string& user_id) {
  static const std::set<std::string> kFields = {"id", "prompt", "chat", "system", "prompt_ids", "max_tokens",
                                                "temperature", "top_p", "top_k", "min_p", "seed",
                                                "stop_token_ids", "ignore_eos", "logprobs"};
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
  r.params = default_params(o);
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
  r.params.validate();
  return r;
}

}  // namespace

std::vector<PromptJob> build_jobs(const CliOptions& o, const ModelInfo& model, const ChatSetup& chat,
                                  const Tokenizer* tokenizer) {
  const Encoder enc{model, chat, tokenizer};
  std::vector<PromptJob> jobs;
  if (o.prompts_file.empty()) {
    PromptJob job;
    job.request.params = default_params(o);
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
      job.request = parse_line(json::parse(text), o, enc, job.user_id);
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
