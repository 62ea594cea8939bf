#include "runtime/cli/requests.hpp"

#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/chat/chat_encode.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/strict_json.hpp"

namespace kiln {

namespace {

using nlohmann::json;

// Text -> ids; chat text is rendered with the model's template first (the messages' text never
// becomes control tokens unless the operator allowed it) and its end-of-turn tokens become stop
// tokens.
struct Encoder {
  const ModelInfo& model;
  const ModelSetup& setup;
  bool special_tokens_in_text;  // --chat-special-tokens

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
    return encode_chat(t, *setup.chat_template, messages, /*add_generation_prompt=*/true, nlohmann::json::object(),
                       special_tokens_in_text)
        .ids;
  }
};

void check_ids(const std::vector<int32_t>& ids, const ModelInfo& model, const char* what) {
  if (ids.empty()) fail(what, " is empty");
  for (int32_t id : ids) {
    if (id < 0 || id >= model.vocab_size) fail(what, ": token id ", id, " is outside the vocabulary (0..", model.vocab_size - 1, ")");
  }
}

// The fields of one request line, read without narrowing: a value that does not fit its field
// is an error naming the field (4294967297 is no token id, and 1e300 is no temperature).
class LineFields {
 public:
  explicit LineFields(const json& line) : line_(line) {}

  bool has(const char* key) const { return line_.contains(key); }
  const json& at(const char* key) const { return line_.at(key); }

  std::string string(const char* key) const {
    const json& v = at(key);
    if (!v.is_string()) wrong(key, v, "a string");
    return v.get<std::string>();
  }
  int32_t integer(const char* key, int32_t fallback, int32_t min) const {
    if (!has(key)) return fallback;
    const auto v = json_integer(at(key), min, std::numeric_limits<int32_t>::max());
    if (!v) wrong(key, at(key), "an integer in [" + std::to_string(min) + ", 2147483647]");
    return static_cast<int32_t>(*v);
  }
  float number(const char* key, float fallback) const {
    if (!has(key)) return fallback;
    const auto v = json_number(at(key));
    if (!v || !std::isfinite(static_cast<float>(*v))) wrong(key, at(key), "a finite number");
    return static_cast<float>(*v);
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_boolean()) wrong(key, at(key), "true or false");
    return at(key).get<bool>();
  }
  std::optional<uint64_t> seed() const {
    if (!has("seed")) return std::nullopt;
    const auto v = json_unsigned(at("seed"));
    if (!v) wrong("seed", at("seed"), "an integer in [0, 2^64)");
    return v;
  }
  // A list of token ids, each in [0, 2^31) (the vocabulary is checked later, naming the id).
  std::vector<int32_t> ids(const char* key) const {
    std::vector<int32_t> out;
    if (!has(key)) return out;
    const json& list = at(key);
    if (!list.is_array()) wrong(key, list, "a list of token ids");
    for (const json& item : list) {
      const auto v = json_integer(item, 0, std::numeric_limits<int32_t>::max());
      if (!v) wrong(key, item, "token ids in [0, 2147483647]");
      out.push_back(static_cast<int32_t>(*v));
    }
    return out;
  }
  // A string or a list of strings (stop).
  std::vector<std::string> strings(const char* key) const {
    if (!has(key)) return {};
    const json& v = at(key);
    if (v.is_string()) return {v.get<std::string>()};
    if (!v.is_array()) wrong(key, v, "a string or a list of strings");
    std::vector<std::string> out;
    for (const json& item : v) {
      if (!item.is_string()) wrong(key, item, "strings");
      out.push_back(item.get<std::string>());
    }
    return out;
  }
  // {"token id": bias}: each key a token id in [0, 2^31), each value a finite number.
  std::vector<std::pair<int32_t, float>> logit_bias() const {
    std::vector<std::pair<int32_t, float>> out;
    if (!has("logit_bias")) return out;
    const json& v = at("logit_bias");
    if (!v.is_object()) wrong("logit_bias", v, "an object {\"token id\": bias}");
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string& token = it.key();
      int32_t id = -1;
      const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), id);
      if (ec != std::errc() || ptr != token.data() + token.size() || id < 0) {
        fail("field 'logit_bias': key '", token.substr(0, 40), "' is not a token id");
      }
      const auto bias = json_number(it.value());
      if (!bias) wrong("logit_bias", it.value(), "a number as the bias of token " + token);
      out.emplace_back(id, static_cast<float>(*bias));
    }
    return out;
  }

 private:
  [[noreturn]] static void wrong(const char* key, const json& value, const std::string& expected) {
    fail("field '", key, "': expected ", expected, ", got ", json_excerpt(value));
  }
  const json& line_;
};

// One JSONL line: exactly one of prompt / chat / prompt_ids, plus optional sampling fields.
Request parse_line(const json& j, std::string_view line_text, const CliOptions& o, const Encoder& enc,
                   const SamplingParams& defaults, std::string& user_id) {
  static const std::set<std::string> kFields = {
      "id", "prompt", "chat", "system", "prompt_ids", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
      "stop", "stop_token_ids", "include_stop_str_in_output", "ignore_eos", "logprobs", "top_logprobs", "min_tokens",
      "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "prompt_logprobs", "json_schema",
      "grammar"};
  if (!j.is_object()) fail("expected a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!kFields.count(it.key())) fail("unknown field '", it.key().substr(0, 40), "'");
  }
  const LineFields f(j);
  if (f.has("id")) user_id = f.at("id").is_string() ? f.at("id").get<std::string>() : json_excerpt(f.at("id"));

  Request r;
  r.params = defaults;
  const int sources = f.has("prompt") + f.has("chat") + f.has("prompt_ids");
  if (sources != 1) fail("give exactly one of \"prompt\", \"chat\", \"prompt_ids\"");
  if (f.has("prompt")) r.prompt = enc.text(f.string("prompt"));
  if (f.has("chat")) {
    r.prompt = enc.chat_turn(f.string("chat"), f.has("system") ? f.string("system") : o.system, r.params.stop_token_ids);
  }
  if (f.has("prompt_ids")) {
    r.prompt = f.ids("prompt_ids");
    check_ids(r.prompt, enc.model, "prompt_ids");
  }
  r.params.max_tokens = f.integer("max_tokens", r.params.max_tokens, 1);
  r.params.temperature = f.number("temperature", r.params.temperature);
  r.params.top_p = f.number("top_p", r.params.top_p);
  r.params.top_k = f.integer("top_k", r.params.top_k, 0);
  r.params.min_p = f.number("min_p", r.params.min_p);
  if (f.has("seed")) r.params.seed = f.seed();
  for (int32_t id : f.ids("stop_token_ids")) r.params.stop_token_ids.push_back(id);
  r.params.ignore_eos = f.boolean("ignore_eos", r.params.ignore_eos);
  r.params.logprobs = f.boolean("logprobs", r.params.logprobs);
  r.params.top_logprobs = f.integer("top_logprobs", r.params.top_logprobs, 0);
  if (r.params.top_logprobs > 0) r.params.logprobs = true;
  r.params.min_tokens = f.integer("min_tokens", r.params.min_tokens, 0);
  if (f.has("prompt_logprobs")) r.params.prompt_logprobs = f.integer("prompt_logprobs", 0, 0);
  r.params.presence_penalty = f.number("presence_penalty", r.params.presence_penalty);
  r.params.frequency_penalty = f.number("frequency_penalty", r.params.frequency_penalty);
  r.params.repetition_penalty = f.number("repetition_penalty", r.params.repetition_penalty);
  r.params.include_stop_str_in_output = f.boolean("include_stop_str_in_output", r.params.include_stop_str_in_output);
  if (f.has("stop")) r.params.stop = f.strings("stop");
  for (const auto& bias : f.logit_bias()) r.params.logit_bias.push_back(bias);
  // Structured output (llama.cpp server's fields): a JSON schema (an object, or its text) or a GBNF
  // grammar; either replaces the command line's.
  if (f.has("json_schema") || f.has("grammar")) {
    if (f.has("json_schema") && f.has("grammar")) fail("give at most one of \"json_schema\", \"grammar\"");
    if (!enc.setup.structured) {
      fail("structured output needs a tokenizer: give -m with a tokenizer.json, a .gguf, or --tokenizer");
    }
    if (f.has("grammar")) {
      r.params.constraint = enc.setup.structured->grammar(f.string("grammar"));
    } else {
      const json& schema = f.at("json_schema");
      // In the line's key order (nlohmann::json sorts keys): from the line's text, already checked strictly.
      nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(line_text)["json_schema"];
      if (schema.is_string()) ordered = parse_ordered_json_strict(schema.get<std::string>(), "field 'json_schema'");
      r.params.constraint = enc.setup.structured->json_schema(ordered);
    }
  }
  r.params.validate();
  return r;
}

// Longest request line read: a prompt of a few hundred thousand tokens, as text or ids, fits
// many times over; a file without newlines must not be read into memory whole.
constexpr size_t kMaxLineBytes = size_t{64} << 20;

// The next line of `in` (without its newline); false at the end. A line longer than `max` bytes
// is read to its end but kept only up to `max`, and `too_long` is set.
bool next_line(std::istream& in, std::string& line, bool& too_long, size_t max) {
  line.clear();
  too_long = false;
  std::streambuf* buffer = in.rdbuf();
  bool any = false;
  for (int c; (c = buffer->sbumpc()) != std::char_traits<char>::eof();) {
    any = true;
    if (c == '\n') return true;
    if (line.size() < max) {
      line.push_back(static_cast<char>(c));
    } else {
      too_long = true;
    }
  }
  return any;
}

}  // namespace

std::vector<PromptJob> build_jobs(const CliOptions& o, const ModelInfo& model, const ModelSetup& setup,
                                  const SamplingParams& defaults) {
  const Encoder enc{model, setup, o.chat_special_tokens};
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

  // A pipe or FIFO is fine here (--prompts-file <(generate)): lines are read as they come.
  std::ifstream in(o.prompts_file, std::ios::binary);
  if (!in) fail(o.prompts_file, ": cannot read the file");
  std::string text;
  bool too_long = false;
  for (int32_t line = 1; next_line(in, text, too_long, kMaxLineBytes); ++line) {
    if (!too_long && text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are allowed
    PromptJob job;
    job.line = line;
    try {
      if (too_long) fail("the line is longer than ", kMaxLineBytes, " bytes");
      job.request = parse_line(parse_json_strict(text, "the request"), text, o, enc, defaults, job.user_id);
      if (!job.request.params.seed && o.seed) job.request.params.seed = *o.seed + static_cast<uint64_t>(jobs.size());
    } catch (const Error& e) {
      job.error = o.prompts_file + ":" + std::to_string(line) + ": " + e.what();
    }
    jobs.push_back(std::move(job));
  }
  if (in.bad()) fail(o.prompts_file, ": read error");
  if (jobs.empty()) fail(o.prompts_file, ": no requests in the file");
  return jobs;
}

}  // namespace kiln
