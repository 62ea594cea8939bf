#include "runtime/cli/requests.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/core/error.hpp"
#include "runtime/core/strict_json.hpp"
#include "runtime/tokenizer/chat_template.hpp"

namespace kiln {

namespace {

using nlohmann::json;

// Text -> ids; chat text is rendered first (its text never becomes control tokens unless the
// operator allowed it) and its end-of-turn tokens become stop tokens.
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
    options.special_tokens_in_text = chat.special_tokens_in_text;
    for (int32_t id : chat_stop_ids(format, t)) stops.push_back(id);
    return encode_chat(t, format, system, user, options);
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

 private:
  [[noreturn]] static void wrong(const char* key, const json& value, const std::string& expected) {
    fail("field '", key, "': expected ", expected, ", got ", json_excerpt(value));
  }
  const json& line_;
};

// One JSONL line: exactly one of prompt / chat / prompt_ids, plus optional sampling fields.
Request parse_line(const json& j, const CliOptions& o, const Encoder& enc, std::string& user_id) {
  static const std::set<std::string> kFields = {"id", "prompt", "chat", "system", "prompt_ids", "max_tokens",
                                                "temperature", "top_p", "top_k", "min_p", "seed",
                                                "stop_token_ids", "ignore_eos", "logprobs"};
  if (!j.is_object()) fail("expected a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!kFields.count(it.key())) fail("unknown field '", it.key(), "'");
  }
  const LineFields f(j);
  if (f.has("id")) user_id = f.at("id").is_string() ? f.at("id").get<std::string>() : json_excerpt(f.at("id"));

  Request r;
  r.params = default_params(o);
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
  r.params.seed = f.seed();
  for (int32_t id : f.ids("stop_token_ids")) r.params.stop_token_ids.push_back(id);
  r.params.ignore_eos = f.boolean("ignore_eos", r.params.ignore_eos);
  r.params.logprobs = f.boolean("logprobs", r.params.logprobs);
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

  // A pipe or FIFO is fine here (--prompts-file <(generate)): lines are read as they come.
  std::ifstream in(o.prompts_file, std::ios::binary);
  if (!in) fail(o.prompts_file, ": cannot read the file");
  std::string text;
  bool too_long = false;
  for (int32_t line = 1; next_line(in, text, too_long, kMaxLineBytes); ++line) {
    if (!too_long && text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are allowed
    PromptJob job;
    job.line = line;
    const std::string where = o.prompts_file + ":" + std::to_string(line);
    try {
      if (too_long) fail("the line is longer than ", kMaxLineBytes, " bytes");
      job.request = parse_line(parse_json_strict(text, "the request"), o, enc, job.user_id);
      if (!job.request.params.seed && o.seed) job.request.params.seed = *o.seed + static_cast<uint64_t>(jobs.size());
    } catch (const Error& e) {
      job.error = where + ": " + e.what();
    }
    jobs.push_back(std::move(job));
  }
  if (in.bad()) fail(o.prompts_file, ": read error");
  if (jobs.empty()) fail(o.prompts_file, ": no requests in the file");
  return jobs;
}

}  // namespace kiln
