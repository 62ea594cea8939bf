#include "runtime/server/openai_api.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <unordered_set>

#include "runtime/chat/chat_encode.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/strict_json.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace kiln {

using nlohmann::json;

json error_body(int status, const std::string& message, const std::string& param) {
  const char* type = status == 400 ? "BadRequestError"
                     : status == 401 ? "AuthenticationError"
                     : status == 404 ? "NotFoundError"
                     : status == 413 ? "RequestTooLargeError"
                     : status == 503 ? "ServiceUnavailableError"
                                     : "InternalServerError";
  return {{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? json(nullptr) : json(param)}, {"code", status}}}};
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "a number";
  }
}

// Reads optional typed fields, naming the field in every error.
struct Fields {
  const json& body;

  bool has(const char* key) const { return body.contains(key) && !body[key].is_null(); }

  double number(const char* key, double lo, double hi, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = body[key];
    if (!v.is_number()) bad(key, std::string("'") + key + "' must be a number, not " + type_name(v));
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi)) {
      bad(key, std::string("'") + key + "' = " + v.dump() + " is out of range; expected a value in [" +
                   json(lo).dump() + ", " + json(hi).dump() + "]");
    }
    return x;
  }
  // An integer in [lo, hi], never narrowed (json_integer: 18446744073709551615 is not -1); a float
  // with an integral value (2.0) counts, as pydantic's lax mode lets it in vLLM.
  int64_t integer(const char* key, int64_t lo, int64_t hi, int64_t fallback) const {
    if (!has(key)) return fallback;
    const json& v = body[key];
    const double d = v.is_number_float() ? v.get<double>() : 0.0;
    const bool integral_float = v.is_number_float() && std::isfinite(d) && d == std::floor(d);
    if (!v.is_number_integer() && !integral_float) {
      bad(key, std::string("'") + key + "' must be an integer, not " + (v.is_number() ? v.dump() : type_name(v)));
    }
    std::optional<int64_t> x = json_integer(v, lo, hi);
    if (integral_float && d >= static_cast<double>(lo) && d <= static_cast<double>(hi)) x = static_cast<int64_t>(d);
    if (!x) {
      bad(key, std::string("'") + key + "' = " + v.dump() + " is out of range; expected a value in [" +
                   std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return *x;
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!body[key].is_boolean()) bad(key, std::string("'") + key + "' must be true or false, not " + type_name(body[key]));
    return body[key].get<bool>();
  }
};

std::vector<int32_t> token_ids(const json& v, const std::string& param, const ApiModel& model) {
  std::vector<int32_t> ids;
  for (const json& t : v) {
    if (!t.is_number_integer()) bad(param, "'" + param + "' must hold token ids (integers), not " + t.dump());
    const std::optional<int64_t> id = json_integer(t, 0, model.vocab_size - 1);
    if (!id) {
      bad(param, "'" + param + "': token id " + t.dump() + " is outside the vocabulary [0, " +
                     std::to_string(model.vocab_size) + ")");
    }
    ids.push_back(static_cast<int32_t>(*id));
  }
  return ids;
}

const Tokenizer& need_tokenizer(const ApiModel& model, const std::string& param) {
  if (!model.tokenizer) bad(param, "this server has no tokenizer: send token ids ('prompt': [1, 2, 3])");
  return *model.tokenizer;
}

void check_length(const std::vector<int32_t>& prompt, const ApiModel& model, const std::string& param) {
  if (prompt.empty()) bad(param, "'" + param + "' is empty");
  if (static_cast<int64_t>(prompt.size()) >= model.max_model_len) {
    bad(param, "this model's maximum context length is " + std::to_string(model.max_model_len) +
                   " tokens, but the prompt has " + std::to_string(prompt.size()) + " tokens");
  }
}

// Fields asking for what this server does not do, refused rather than ignored: ignored, each would
// answer with text that silently breaks the client's expectation (a string outside the pattern,
// beams never searched). Fields that change nothing here ("user", "metadata", ...) are ignored, as
// vLLM ignores fields it does not know.
void refuse_unsupported(const Fields& f) {
  if (f.has("guided_whitespace_pattern")) {
    bad("guided_whitespace_pattern", "'guided_whitespace_pattern' is not supported (JSON here allows a space, or a "
                                     "newline and up to 20 spaces or tabs, between tokens; or none: structured_outputs."
                                     "disable_any_whitespace)");
  }
  if (f.has("use_beam_search") && f.boolean("use_beam_search", false)) {
    bad("use_beam_search", "'use_beam_search' is not supported");
  }
  // vLLM's fields that would change the answer and are not done here.
  for (const char* field : {"structural_tag", "logits_processors", "chat_template"}) {
    if (f.has(field)) {
      bad(field, std::string("'") + field + "' is not supported" +
                     (std::string(field) == "chat_template" ? " (the server's template is --chat-template's)" : ""));
    }
  }
  if (f.has("priority") && f.integer("priority", INT64_MIN, INT64_MAX, 0) != 0) {
    bad("priority", "'priority' is not supported (requests are served first come, first served)");
  }
}

// vLLM's bad_words as token sequences, as vLLM tokenizes them: each word (leading space dropped)
// alone, and with a space before it where that spells the word as a different first token in as
// many tokens (the word inside a text).
void parse_bad_words(const json& words, const ApiModel& model, SamplingParams& p) {
  if (!words.is_array() || words.size() > 1024) bad("bad_words", "'bad_words' must be a list of at most 1024 strings");
  const Tokenizer& t = need_tokenizer(model, "bad_words");
  for (const json& w : words) {
    if (!w.is_string()) bad("bad_words", "'bad_words' must be a list of strings, not holding " + w.dump());
    const std::string word(utf8::trim_white_space(w.get<std::string>(), true, false));
    if (word.empty()) bad("bad_words", "'bad_words' holds an empty word");
    const std::vector<int32_t> alone = t.encode(word, /*add_bos=*/false);
    if (alone.empty()) bad("bad_words", "'bad_words': '" + word + "' has no tokens");
    p.bad_words_ids.push_back(alone);
    const std::vector<int32_t> spaced = t.encode(" " + word, /*add_bos=*/false);
    if (!spaced.empty() && spaced.size() == alone.size() && spaced[0] != alone[0]) p.bad_words_ids.push_back(spaced);
  }
}

// What structured output (or a forced tool call) cannot take beside it, by name: the format decides
// where the text ends and which tokens come (SamplingParams::validate holds the same rule).
void refuse_beside_constraint(const Fields& f, const ApiRequest& r) {
  if (!r.params.constraint) return;
  const std::pair<const char*, bool> fields[] = {{"ignore_eos", r.params.ignore_eos},
                                                 {"allowed_token_ids", !r.params.allowed_token_ids.empty()},
                                                 {"bad_words", !r.params.bad_words_ids.empty()}};
  for (const auto& [field, set] : fields) {
    if (set) {
      bad(field, std::string("'") + field + "' cannot be combined with structured output or a forced tool call: the "
                 "format decides which tokens come and where the text ends");
    }
  }
}

// vLLM's truncate_prompt_tokens: only the prompt's last k tokens (-1: as many as the model takes
// with room for one new token).
void truncate_prompts(const Fields& f, const ApiModel& model, ApiRequest& r) {
  if (!f.has("truncate_prompt_tokens")) return;
  int64_t k = f.integer("truncate_prompt_tokens", -1, INT32_MAX, -1);
  if (k == 0) bad("truncate_prompt_tokens", "'truncate_prompt_tokens' must be -1 (the model's length) or at least 1");
  if (k < 0) k = model.max_model_len - 1;
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    std::vector<int32_t>& p = r.prompts[i];
    if (static_cast<int64_t>(p.size()) <= k) continue;
    p.erase(p.begin(), p.end() - k);
    r.prompt_texts[i] = model.tokenizer ? model.tokenizer->decode(p) : "";
  }
}

// Each stop token once, in the order first given: the list is copied into every choice, so it is
// kept no longer than the vocabulary however often a body repeats an id.
void drop_repeated_stop_tokens(SamplingParams& p) {
  std::unordered_set<int32_t> seen;
  std::erase_if(p.stop_token_ids, [&](int32_t id) { return !seen.insert(id).second; });
}

// The sampling fields common to both endpoints; max_tokens is left to the caller.
void parse_sampling(const Fields& f, const ApiModel& model, ApiRequest& r) {
  refuse_unsupported(f);
  SamplingParams& p = r.params;
  const GenerationDefaults& d = model.defaults;
  p.temperature = static_cast<float>(f.number("temperature", 0.0, 100.0, d.temperature.value_or(1.0f)));
  p.top_p = static_cast<float>(f.number("top_p", 1e-9, 1.0, d.top_p.value_or(1.0f)));
  const int64_t top_k = f.integer("top_k", -1, model.vocab_size, d.top_k.value_or(0));
  p.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);  // vLLM: -1 (or 0) is off
  p.min_p = static_cast<float>(f.number("min_p", 0.0, 0.999999, d.min_p.value_or(0.0f)));
  p.presence_penalty = static_cast<float>(f.number("presence_penalty", -2.0, 2.0, 0.0));
  p.frequency_penalty = static_cast<float>(f.number("frequency_penalty", -2.0, 2.0, 0.0));
  p.repetition_penalty = static_cast<float>(f.number("repetition_penalty", 1e-6, 100.0, d.repetition_penalty.value_or(1.0f)));
  p.ignore_eos = f.boolean("ignore_eos", false);
  p.include_stop_str_in_output = f.boolean("include_stop_str_in_output", false);
  p.skip_special_tokens = f.boolean("skip_special_tokens", true);
  if (f.has("seed")) p.seed = static_cast<uint64_t>(f.integer("seed", INT64_MIN, INT64_MAX, 0));
  r.n = static_cast<int32_t>(f.integer("n", 1, 128, 1));
  r.stream = f.boolean("stream", false);
  r.tokens_as_ids = f.boolean("return_tokens_as_token_ids", false);
  if (f.has("allowed_token_ids")) {
    const json& a = f.body["allowed_token_ids"];
    if (!a.is_array() || a.empty()) bad("allowed_token_ids", "'allowed_token_ids' must be a non-empty list of token ids");
    p.allowed_token_ids = token_ids(a, "allowed_token_ids", model);
    std::sort(p.allowed_token_ids.begin(), p.allowed_token_ids.end());  // each once: copied into every choice
    p.allowed_token_ids.erase(std::unique(p.allowed_token_ids.begin(), p.allowed_token_ids.end()),
                              p.allowed_token_ids.end());
  }
  if (f.has("bad_words")) parse_bad_words(f.body["bad_words"], model, p);
  if (!p.bad_words_ids.empty() && !p.allowed_token_ids.empty()) {
    bad("bad_words", "'bad_words' cannot be combined with 'allowed_token_ids' (list the allowed tokens without them)");
  }

  if (f.has("stop")) {
    const json& stop = f.body["stop"];
    if (stop.is_string()) {
      p.stop.push_back(stop.get<std::string>());
    } else if (stop.is_array()) {
      for (const json& s : stop) {
        if (!s.is_string()) bad("stop", "'stop' must be a string or a list of strings, not " + stop.dump());
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or a list of strings, not " + type_name(stop));
    }
    try {
      check_stop_strings(p.stop);
    } catch (const Error& e) {
      bad("stop", e.what());
    }
  }
  if (f.has("stop_token_ids")) {
    if (!f.body["stop_token_ids"].is_array()) bad("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    p.stop_token_ids = token_ids(f.body["stop_token_ids"], "stop_token_ids", model);
  }
  if (f.has("logit_bias")) {
    const json& bias = f.body["logit_bias"];
    if (!bias.is_object()) bad("logit_bias", "'logit_bias' must be an object {\"token id\": bias}");
    // Keys are distinct strings ("5", "05", " 5") but may name one token: at most one bias a token,
    // so the list (copied into every choice) is no longer than the vocabulary.
    std::unordered_set<int64_t> biased;
    for (auto it = bias.begin(); it != bias.end(); ++it) {
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(it.key(), &used);
        if (used != it.key().size()) id = -1;
      } catch (const std::exception&) {
      }
      if (id < 0 || id >= model.vocab_size) {
        bad("logit_bias", "'logit_bias' key '" + it.key() + "' is not a token id in [0, " + std::to_string(model.vocab_size) + ")");
      }
      if (!it.value().is_number() || !(it.value().get<double>() >= -100.0 && it.value().get<double>() <= 100.0)) {
        bad("logit_bias", "'logit_bias' value for token " + it.key() + " must be a number in [-100, 100], not " + it.value().dump());
      }
      if (!biased.insert(id).second) bad("logit_bias", "'logit_bias' names token " + std::to_string(id) + " twice");
      p.logit_bias.emplace_back(static_cast<int32_t>(id), it.value().get<float>());
    }
  }
  if (f.has("prompt_logprobs")) {
    r.params.prompt_logprobs = static_cast<int32_t>(f.integer("prompt_logprobs", 0, kMaxTopLogprobs, 0));
  }
  if (f.has("stream_options")) {
    const json& o = f.body["stream_options"];
    if (!o.is_object()) bad("stream_options", "'stream_options' must be an object");
    if (o.contains("include_usage") && !o["include_usage"].is_null()) {
      if (!o["include_usage"].is_boolean()) bad("stream_options", "'stream_options.include_usage' must be true or false");
      r.include_usage = o["include_usage"].get<bool>();
    }
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed with 'stream': true");
  }
}

// Structured output (OpenAI's response_format, vLLM's guided_* and structured_outputs): at most one
// of them, compiled to the constraint every choice of the request follows.
void parse_structured(const Fields& f, const ApiModel& model, std::string_view raw, ApiRequest& r) {
  struct Ask {
    std::string param, kind;  // kind: json, json_object, choice, grammar, regex
    json value;
    std::vector<std::string> at;  // where in the body (for the schema's key order)
  };
  std::vector<Ask> asks;
  bool compact = false;  // JSON without whitespace
  if (f.has("response_format")) {
    const json& format = f.body["response_format"];
    if (!format.is_object() || !format.contains("type") || !format["type"].is_string()) {
      bad("response_format", "'response_format' must be an object with a 'type' (text, json_object, json_schema)");
    }
    const std::string type = format["type"].get<std::string>();
    if (type == "json_object") {
      asks.push_back({"response_format", "json_object", json()});
    } else if (type == "json_schema") {
      const json& js = format.value("json_schema", json());
      if (!js.is_object() || !js.contains("schema")) {
        bad("response_format", "'response_format' of type json_schema needs 'json_schema': {\"name\": ..., \"schema\": {...}}");
      }
      asks.push_back({"response_format", "json", js["schema"], {"response_format", "json_schema", "schema"}});
    } else if (type != "text") {
      bad("response_format", "'response_format' type '" + type + "' is not one of text, json_object, json_schema");
    }
  }
  if (f.has("guided_json")) asks.push_back({"guided_json", "json", f.body["guided_json"], {"guided_json"}});
  if (f.has("guided_choice")) asks.push_back({"guided_choice", "choice", f.body["guided_choice"]});
  if (f.has("guided_grammar")) asks.push_back({"guided_grammar", "grammar", f.body["guided_grammar"]});
  if (f.has("guided_regex")) asks.push_back({"guided_regex", "regex", f.body["guided_regex"]});
  if (f.has("structured_outputs")) {
    const json& so = f.body["structured_outputs"];
    if (!so.is_object()) bad("structured_outputs", "'structured_outputs' must be an object");
    for (const auto& [key, value] : so.items()) {
      if (value.is_null()) continue;
      if (key == "json") {
        asks.push_back({"structured_outputs", "json", value, {"structured_outputs", "json"}});
      } else if (key == "choice") {
        asks.push_back({"structured_outputs", "choice", value});
      } else if (key == "grammar") {
        asks.push_back({"structured_outputs", "grammar", value});
      } else if (key == "regex") {
        asks.push_back({"structured_outputs", "regex", value});
      } else if (key == "json_object") {
        if (!value.is_boolean()) bad("structured_outputs", "'structured_outputs.json_object' must be true or false");
        if (value.get<bool>()) asks.push_back({"structured_outputs", "json_object", json()});
      } else if (key == "disable_any_whitespace") {
        if (!value.is_boolean()) bad("structured_outputs", "'structured_outputs.disable_any_whitespace' must be true or false");
        compact = value.get<bool>();
      } else if (key != "disable_fallback" && key != "disable_additional_properties" && key != "backend") {
        // (The others are hints for vLLM's choice of backend; absent additionalProperties is false here already.)
        bad("structured_outputs", "'structured_outputs." + key + "' is not supported (json, json_object, choice, grammar, regex)");
      }
    }
  }
  if (f.has("guided_decoding_backend") && !f.body["guided_decoding_backend"].is_string()) {
    bad("guided_decoding_backend", "'guided_decoding_backend' must be a string");  // a hint only: one backend here
  }
  if (asks.empty()) return;
  const Ask& ask = asks.front();
  if (asks.size() > 1) {
    bad(asks[1].param, "give one structured output request at most ('" + ask.param + "' and '" + asks[1].param + "')");
  }
  if (!model.structured) bad(ask.param, "this server has no tokenizer: structured output needs one");
  if (r.params.min_tokens > 0) {
    bad("min_tokens", "'min_tokens' cannot be combined with structured output: the format decides where the text ends");
  }
  try {
    if (ask.kind == "json_object") {
      r.params.constraint = model.structured->json_object(compact);
    } else if (ask.kind == "json") {
      // In the order the client wrote it: from the raw body (already checked strictly, so
      // nlohmann's own parser takes it), or the text guided_json may hold.
      nlohmann::ordered_json schema = ask.value;
      if (!raw.empty()) {
        schema = nlohmann::ordered_json::parse(raw);
        for (const std::string& key : ask.at) schema = nlohmann::ordered_json(schema[key]);
      }
      if (schema.is_string()) schema = parse_ordered_json_strict(schema.get<std::string>(), "the schema");
      r.params.constraint = model.structured->json_schema(schema, compact);
    } else if (ask.kind == "choice") {
      if (!ask.value.is_array()) bad(ask.param, "'" + ask.param + "' choices must be a list of strings");
      std::vector<std::string> choices;
      for (const json& c : ask.value) {
        if (!c.is_string()) bad(ask.param, "'" + ask.param + "' choices must be a list of strings, not " + c.dump());
        choices.push_back(c.get<std::string>());
      }
      r.params.constraint = model.structured->choice(choices);
    } else if (ask.kind == "regex") {
      if (!ask.value.is_string()) bad(ask.param, "'" + ask.param + "' regex must be a string");
      r.params.constraint = model.structured->regex(ask.value.get<std::string>());
    } else {
      if (!ask.value.is_string()) bad(ask.param, "'" + ask.param + "' grammar must be a string (GBNF)");
      r.params.constraint = model.structured->grammar(ask.value.get<std::string>());
    }
  } catch (const Error& e) {
    bad(ask.param, "'" + ask.param + "': " + e.what());
  }
}

// tool_choice. "auto" and "none": the tools go to the chat template and a call the model writes
// comes back as its text (no parser of the models' own call formats yet). "required" or
// {"type": "function", "function": {"name": ...}}: as vLLM does it, the answer is constrained to
// JSON (a list of {"name", "parameters"}, or the named function's arguments) whatever the model's
// own format, and comes back as tool_calls.
void parse_tool_choice(const Fields& f, const ApiModel& model, std::string_view raw, ApiRequest& r) {
  const bool has_tools = f.has("tools") && f.body["tools"].is_array() && !f.body["tools"].empty();
  const json choice = f.has("tool_choice") ? f.body["tool_choice"] : json("auto");
  if (choice.is_string() && choice == "auto" && has_tools && model.tool_parser) {
    r.tool_choice = ApiRequest::ToolChoice::parsed;
    return;
  }
  if (choice.is_string() && (choice == "none" || choice == "auto")) return;
  const bool required = choice.is_string() && choice == "required";
  const bool named = choice.is_object() && choice.value("type", json()) == "function" && choice.contains("function") &&
                     choice["function"].is_object() && choice["function"].contains("name") &&
                     choice["function"]["name"].is_string();
  if (!required && !named) {
    bad("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                       "\"function\": {\"name\": ...}}, not " + choice.dump());
  }
  if (r.params.constraint) bad("tool_choice", "'tool_choice' forcing a call cannot be combined with structured output");
  if (!model.structured) bad("tool_choice", "this server has no tokenizer: a forced tool call needs one");
  if (r.params.min_tokens > 0) bad("min_tokens", "'min_tokens' cannot be combined with a forced tool call");
  // The tools in the body's key order (their schemas' properties are written in it).
  const nlohmann::ordered_json tools =
      raw.empty() ? nlohmann::ordered_json(f.body.value("tools", json())) : nlohmann::ordered_json::parse(raw).value("tools", nlohmann::ordered_json());
  if (!tools.is_array() || tools.empty()) bad("tools", "'tool_choice' " + choice.dump() + " needs a non-empty 'tools' list");
  const auto parameters = [&](const nlohmann::ordered_json& tool, size_t i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!tool.is_object() || tool.value("type", nlohmann::ordered_json()) != "function" || !tool.contains("function") ||
        !tool["function"].is_object() || !tool["function"].contains("name") || !tool["function"]["name"].is_string()) {
      bad("tools", where + " must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}}");
    }
    // No parameters: a function of none.
    return tool["function"].contains("parameters") ? tool["function"]["parameters"]
                                                  : nlohmann::ordered_json{{"type", "object"}, {"properties", nlohmann::ordered_json::object()}};
  };
  nlohmann::ordered_json schema;
  if (named) {
    r.tool_name = choice["function"]["name"].get<std::string>();
    for (size_t i = 0; i < tools.size() && schema.is_null(); ++i) {
      nlohmann::ordered_json p = parameters(tools[i], i);
      if (tools[i]["function"]["name"] == r.tool_name) schema = std::move(p);
    }
    if (schema.is_null()) bad("tool_choice", "'tool_choice' names the function '" + r.tool_name + "', which 'tools' does not list");
    r.tool_choice = ApiRequest::ToolChoice::named;
  } else {
    // [{"name": one of them, "parameters": its arguments}, ...]: each tool's schema a branch, their
    // $defs gathered at the top, where their $refs point.
    nlohmann::ordered_json branches = nlohmann::ordered_json::array();
    schema = {{"type", "array"}, {"minItems", 1}};
    for (size_t i = 0; i < tools.size(); ++i) {
      nlohmann::ordered_json p = parameters(tools[i], i);
      for (const char* defs : {"$defs", "definitions"}) {
        if (!p.is_object() || !p.contains(defs)) continue;
        if (!p[defs].is_object()) bad("tools", "tools[" + std::to_string(i) + "]: '" + defs + "' must be an object of schemas");
        for (const auto& [name, def] : p[defs].items()) {
          nlohmann::ordered_json& slot = schema[defs][name];
          if (!slot.is_null() && slot != def) bad("tools", "two tools define the schema '" + name + "' differently");
          slot = def;
        }
        p.erase(defs);
      }
      branches.push_back({{"type", "object"},
                          {"properties", {{"name", {{"const", tools[i]["function"]["name"]}}}, {"parameters", p}}},
                          {"required", {"name", "parameters"}},
                          {"additionalProperties", false}});
    }
    schema["items"] = {{"anyOf", branches}};
    r.tool_choice = ApiRequest::ToolChoice::required;
  }
  try {
    r.params.constraint = model.structured->json_schema(schema);
  } catch (const Error& e) {
    bad("tools", std::string("a tool's parameters: ") + e.what());
  }
}

void parse_max_tokens(const Fields& f, const ApiModel& model, ApiRequest& r, int32_t fallback) {
  const char* key = f.has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  size_t longest = 0;
  for (const auto& p : r.prompts) longest = std::max(longest, p.size());
  const int32_t room = model.max_model_len - static_cast<int32_t>(longest);
  const int64_t max_tokens = f.integer(key, 1, INT32_MAX, std::min(fallback, room));
  if (static_cast<int64_t>(longest) + max_tokens > model.max_model_len) {
    bad(key, std::string("'") + key + "' = " + std::to_string(max_tokens) + " plus the prompt's " + std::to_string(longest) +
                 " tokens exceeds this model's maximum context length of " + std::to_string(model.max_model_len) + " tokens");
  }
  r.params.max_tokens = static_cast<int32_t>(max_tokens);
  r.params.min_tokens = static_cast<int32_t>(f.integer("min_tokens", 0, max_tokens, 0));
}

// What a request makes the server hold, bounded before anything is sized, with a 400 that says how
// to ask for less.
// - Its choices (prompts × n) wait for batch slots together: more than --max-waiting
//   (ApiModel::max_choices) would each be refused in turn (a 503 no retry gets past), and sizing
//   their results first let one body claim memory by the gigabyte (50,000 one-token prompts × 128:
//   2.1 GB; 8 MiB holds ~2.7 M such prompts).
// - Each choice keeps its prompt's and its tokens' logprob alternatives until it is answered, and
//   the whole answer is one JSON object: 1024 choices of 8,000 prompt tokens with 20 alternatives
//   (a 400 KB body) would be 172 M entries, tens of GB. 4 M entries (a few hundred MB of answer)
//   is far above an evaluation harness's prompt-and-answer logprobs.
constexpr int64_t kMaxLogprobEntries = int64_t{1} << 22;
constexpr int64_t kMaxListedTokens = int64_t{1} << 22;  // 16 MiB of token ids

void check_volume(const ApiRequest& r, const ApiModel& model) {
  int64_t prompt_entries = 0, token_entries = 0;
  for (const auto& prompt : r.prompts) {
    if (r.params.prompt_logprobs) {
      prompt_entries += r.n * static_cast<int64_t>(prompt.size() - 1) * (*r.params.prompt_logprobs + 1);
    }
    if (r.params.logprobs) token_entries += r.n * static_cast<int64_t>(r.params.max_tokens) * (r.params.top_logprobs + 1);
  }
  const int64_t entries = prompt_entries + token_entries;
  if (entries > kMaxLogprobEntries) {
    bad(prompt_entries > token_entries ? "prompt_logprobs" : "logprobs",
        "this request asks for " + std::to_string(entries) + " logprob entries (prompts x n x tokens x (alternatives + 1), "
        "for its prompt_logprobs and logprobs); the server answers at most " + std::to_string(kMaxLogprobEntries) +
        " a request: ask for fewer prompts, choices, tokens or alternatives");
  }
  const int64_t choices = static_cast<int64_t>(r.prompts.size()) * r.n;
  // The token lists every choice carries a copy of.
  int64_t bad_word_tokens = 0;
  for (const auto& w : r.params.bad_words_ids) bad_word_tokens += static_cast<int64_t>(w.size());
  const int64_t listed = choices * (static_cast<int64_t>(r.params.allowed_token_ids.size()) + bad_word_tokens);
  if (listed > kMaxListedTokens) {
    bad(bad_word_tokens > static_cast<int64_t>(r.params.allowed_token_ids.size()) ? "bad_words" : "allowed_token_ids",
        "this request lists " + std::to_string(listed) + " tokens across its completions (allowed_token_ids and "
        "bad_words' tokens, copied into each); the server takes at most " + std::to_string(kMaxListedTokens) +
        " a request");
  }
  if (choices > model.max_choices) {
    bad(r.prompts.size() > 1 ? "prompt" : "n",
        "this request asks for " + std::to_string(choices) + " completions (" + std::to_string(r.prompts.size()) +
            " prompt" + (r.prompts.size() == 1 ? "" : "s") + " x n = " + std::to_string(r.n) +
            "); the server queues at most " + std::to_string(model.max_choices) + " at once (--max-waiting)");
  }
}

}  // namespace

void check_model_field(const json& body, const ApiModel& model) {
  if (!body.contains("model") || body["model"].is_null()) return;
  if (!body["model"].is_string()) bad("model", "'model' must be a string");
  const std::string name = body["model"].get<std::string>();
  if (name != model.name) throw ApiError(404, "The model '" + name + "' does not exist; this server serves '" + model.name + "'", "model");
}

ApiRequest parse_completion_request(const json& body, const ApiModel& model, std::string_view raw) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  check_model_field(body, model);
  const Fields f{body};
  ApiRequest r;
  if (!f.has("prompt")) bad("prompt", "'prompt' is required");
  const json& prompt = body["prompt"];
  const bool special = f.boolean("add_special_tokens", true);  // vLLM: the BOS, for a text prompt
  const auto add_text = [&](const std::string& text) {
    const Tokenizer& t = need_tokenizer(model, "prompt");
    r.prompts.push_back(t.encode(text, special && t.add_bos_by_default()));
    r.prompt_texts.push_back(text);
  };
  if (prompt.is_string()) {
    add_text(prompt.get<std::string>());
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number_integer()) {
    r.prompts.push_back(token_ids(prompt, "prompt", model));
  } else if (prompt.is_array() && !prompt.empty()) {
    for (const json& p : prompt) {
      if (p.is_string()) {
        add_text(p.get<std::string>());
      } else if (p.is_array()) {
        r.prompts.push_back(token_ids(p, "prompt", model));
      } else {
        bad("prompt", "'prompt' must be a string, a list of strings, a list of token ids or a list of such lists");
      }
    }
  } else {
    bad("prompt", "'prompt' must be a non-empty string, list of strings, list of token ids or list of such lists");
  }
  if (r.prompt_texts.size() != r.prompts.size()) {
    r.prompt_texts.clear();
    for (const auto& p : r.prompts) r.prompt_texts.push_back(model.tokenizer ? model.tokenizer->decode(p) : "");
  }
  truncate_prompts(f, model, r);
  for (const auto& p : r.prompts) check_length(p, model, "prompt");
  parse_sampling(f, model, r);
  parse_max_tokens(f, model, r, model.defaults.max_new_tokens.value_or(16));
  parse_structured(f, model, raw, r);
  refuse_beside_constraint(f, r);
  r.echo = f.boolean("echo", false);
  if (f.has("logprobs")) {
    if (body["logprobs"].is_boolean()) bad("logprobs", "'logprobs' of /v1/completions is a count of alternatives (0 to 20), not a boolean");
    r.logprobs = static_cast<int32_t>(f.integer("logprobs", 0, kMaxTopLogprobs, 0));
    r.params.logprobs = true;
    r.params.top_logprobs = r.logprobs;
  }
  if (f.has("suffix")) bad("suffix", "'suffix' is not supported");
  if (f.has("best_of") && f.integer("best_of", 1, 128, 1) != r.n) bad("best_of", "'best_of' other than n is not supported");
  drop_repeated_stop_tokens(r.params);
  r.params.validate();
  check_volume(r, model);
  return r;
}

ApiRequest parse_chat_request(const json& body, const ApiModel& model, std::string_view raw) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  check_model_field(body, model);
  const Fields f{body};
  ApiRequest r;
  r.chat = true;
  if (!model.chat_template) bad("messages", "this model has no chat template: use /v1/completions");
  const Tokenizer& t = need_tokenizer(model, "messages");
  if (!f.has("messages")) bad("messages", "'messages' is required");
  json extra = json::object();
  if (f.has("chat_template_kwargs")) {
    if (!body["chat_template_kwargs"].is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    extra = body["chat_template_kwargs"];
  }
  if (f.has("tools")) extra["tools"] = body["tools"];
  if (f.has("documents")) extra["documents"] = body["documents"];  // for templates that cite them (RAG)
  const bool continue_final = f.boolean("continue_final_message", false);
  const bool add_generation_prompt = f.boolean("add_generation_prompt", !continue_final);
  if (continue_final && add_generation_prompt) {
    bad("continue_final_message", "'continue_final_message' and 'add_generation_prompt' cannot both be true");
  }
  EncodedChat chat;
  try {
    // The template writes the BOS (and its special tokens) as text: no BOS added here unless the
    // client asks (vLLM's add_special_tokens). The messages' text stays text, unlike vLLM: a client
    // cannot write another role's turn.
    chat = encode_chat(t, *model.chat_template, body["messages"], add_generation_prompt, extra,
                       model.special_tokens_in_text, continue_final);
  } catch (const Error& e) {
    bad("messages", e.what());
  }
  // As HF's tokenizer adds it to the rendered text: only where the tokenizer adds a BOS at all.
  if (f.boolean("add_special_tokens", false) && t.add_bos_by_default()) chat.ids.insert(chat.ids.begin(), t.bos_id());
  r.prompts.push_back(std::move(chat.ids));
  r.prompt_texts.push_back(std::move(chat.text));
  truncate_prompts(f, model, r);
  check_length(r.prompts.back(), model, "messages");
  parse_sampling(f, model, r);
  parse_max_tokens(f, model, r, model.defaults.max_new_tokens.value_or(INT32_MAX));
  parse_structured(f, model, raw, r);
  parse_tool_choice(f, model, raw, r);
  refuse_beside_constraint(f, r);
  if (r.params.constraint && model.reasoning_parser) {  // the constraint starts after the thinking (vLLM)
    const ReasoningStart start = reasoning_start(
        r.prompts[0], model.think_tokens, model.chat_stop_ids,
        model.reasoning_parser->opened_by_template() ? ReasoningStart::open : ReasoningStart::may_open);
    r.params.constraint = after_reasoning(std::move(r.params.constraint), model.think_tokens, start);
  }
  for (int32_t id : model.chat_stop_ids) r.params.stop_token_ids.push_back(id);
  drop_repeated_stop_tokens(r.params);
  if (f.boolean("logprobs", false)) {
    r.params.logprobs = true;
    r.logprobs = static_cast<int32_t>(f.integer("top_logprobs", 0, kMaxTopLogprobs, 0));
    r.params.top_logprobs = r.logprobs;
  } else if (f.has("top_logprobs")) {
    bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  }
  r.params.validate();
  check_volume(r, model);
  return r;
}

// ---- responses ----

namespace {

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(rng()), static_cast<unsigned long long>(rng()));
  return std::string(prefix) + hex;
}

std::string sse(const json& j) { return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n"; }

}  // namespace

json usage_json(const Usage& u) {
  json j = {{"prompt_tokens", u.prompt_tokens}, {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  j["prompt_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
  return j;
}

ResponseBuilder::ResponseBuilder(const ApiRequest& request, const ApiModel& model)
    : request_(request), model_(model), id_(random_id(request.chat ? "chatcmpl-" : "cmpl-")),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count()),
      text_offsets_(request.prompts.size() * request.n, 0),
      held_text_(request.chat && (request.tool_choice != ApiRequest::ToolChoice::text || model.reasoning_parser)
                     ? request.prompts.size() * request.n : 0),
      content_sent_(held_text_.size(), 0),
      reasoning_sent_(held_text_.size(), 0),
      held_logprobs_(held_text_.size()) {}

std::optional<std::vector<ToolCall>> ResponseBuilder::tool_calls(const std::string& text, std::string* content) const {
  std::vector<ToolCall> calls;
  if (request_.tool_choice == ApiRequest::ToolChoice::parsed) {
    ParsedAnswer parsed = model_.tool_parser->parse(text);
    if (content) *content = std::move(parsed.content);
    return std::move(parsed.calls);
  }
  if (content) content->clear();
  try {
    if (request_.tool_choice == ApiRequest::ToolChoice::named) {
      calls.push_back({request_.tool_name, nlohmann::ordered_json::parse(text).dump()});
    } else {
      for (const auto& c : nlohmann::ordered_json::parse(text)) calls.push_back({c.at("name").get<std::string>(), c.at("parameters").dump()});
    }
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // cut off by max_tokens or a stop string: the text as it came
  }
  return calls;
}

json ResponseBuilder::answer_fields(const std::string& text, bool delta) const {
  const auto content = [&](const json& c) { return delta ? json{{"content", c}} : json{{"role", "assistant"}, {"content", c}}; };
  if (request_.tool_choice == ApiRequest::ToolChoice::text) return content(text);
  std::string rest;
  const std::optional<std::vector<ToolCall>> calls = tool_calls(text, &rest);
  if (!calls || calls->empty()) return content(text);
  json list = json::array();
  for (const ToolCall& c : *calls) {
    json j = {{"id", random_id("call_")}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
    if (delta) j["index"] = list.size();
    list.push_back(std::move(j));
  }
  json out = content(rest.empty() ? json(nullptr) : json(rest));
  if (delta && rest.empty()) out.erase("content");
  out["tool_calls"] = std::move(list);
  return out;
}

const char* ResponseBuilder::finish_reason(const ChoiceText& c, const std::string& text) const {
  // Calls the model wrote (or was made to write), whole: OpenAI's "tool_calls" (a named function
  // keeps "stop", as OpenAI answers a forced call).
  const bool stopped = c.finish_reason && std::string(c.finish_reason) == "stop";
  if (stopped && request_.tool_choice == ApiRequest::ToolChoice::required) return "tool_calls";
  if (stopped && request_.tool_choice == ApiRequest::ToolChoice::parsed) {
    const auto calls = tool_calls(text, nullptr);
    if (calls && !calls->empty()) return "tool_calls";
  }
  return c.finish_reason;
}

json ResponseBuilder::chunk_base() const {
  return {{"id", id_}, {"object", request_.chat ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
          {"model", model_.name}};
}

json ResponseBuilder::logprobs_json(const ChoiceText& c, size_t text_offset) const {
  if (!request_.params.logprobs) return nullptr;
  const Tokenizer* t = model_.tokenizer;
  // A token's own bytes (possibly part of a character); ids past the tokenizer have none.
  const auto raw = [&](int32_t id) {
    return t && id >= 0 && static_cast<size_t>(id) < t->vocab_size() ? t->token_bytes(id) : std::string_view();
  };
  // A token's text; one that is not whole UTF-8 (part of a character) is written as its bytes,
  // "bytes:\\xe2\\x80" (OpenAI's notation), so different tokens never share a key.
  const auto token_text = [&](int32_t id) -> std::string {
    if (request_.tokens_as_ids) return "token_id:" + std::to_string(id);  // vLLM's spelling
    if (!t) return std::to_string(id);
    const std::string_view bytes = raw(id);
    if (utf8::is_valid(bytes)) return std::string(bytes);
    std::string out = "bytes:";
    char hex[5];
    for (unsigned char b : bytes) {
      std::snprintf(hex, sizeof hex, "\\x%02x", b);
      out += hex;
    }
    return out;
  };
  const auto token_bytes = [&](int32_t id) {
    json bytes = json::array();
    // Named by id, a token's bytes are its name's, as vLLM writes them.
    for (unsigned char b : request_.tokens_as_ids ? token_text(id) : std::string(raw(id))) bytes.push_back(b);
    return bytes;
  };
  if (request_.chat) {
    json content = json::array();
    for (size_t i = 0; i < c.token_ids.size(); ++i) {
      json top = json::array();
      if (i < c.top_logprobs.size()) {
        for (const TokenLogprob& a : c.top_logprobs[i]) {
          top.push_back({{"token", token_text(a.token)}, {"logprob", a.logprob}, {"bytes", token_bytes(a.token)}});
        }
      }
      content.push_back({{"token", token_text(c.token_ids[i])}, {"logprob", c.logprobs.at(i)},
                         {"bytes", token_bytes(c.token_ids[i])}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  size_t offset = text_offset;
  for (size_t i = 0; i < c.token_ids.size(); ++i) {
    const std::string text = token_text(c.token_ids[i]);
    tokens.push_back(text);
    token_logprobs.push_back(c.logprobs.at(i));
    // vLLM's completions format: the N alternatives plus the chosen token, keyed by text.
    json alternatives = json::object();
    if (i < c.top_logprobs.size()) {
      for (const TokenLogprob& a : c.top_logprobs[i]) alternatives[token_text(a.token)] = a.logprob;
    }
    alternatives[text] = c.logprobs.at(i);
    top.push_back(alternatives);
    offsets.push_back(offset);
    offset += text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

json ResponseBuilder::prompt_logprobs_json(const std::vector<PromptTokenLogprob>& p) const {
  // vLLM's format: one entry per prompt position, null for the first (nothing predicts it), else
  // {"<token id>": {"logprob", "rank", "decoded_token"}} for the prompt token and the top-N. The
  // rank is the place in the top-N (1 = most likely); a prompt token outside the top-N has null.
  const Tokenizer* t = model_.tokenizer;
  const auto decoded = [&](int32_t id) -> json {
    if (!t || id < 0 || static_cast<size_t>(id) >= t->vocab_size()) return nullptr;
    return utf8::sanitize(t->token_bytes(id));
  };
  json out = json::array({nullptr});
  for (const PromptTokenLogprob& entry : p) {
    json position = json::object();
    for (size_t k = 0; k < entry.top.size(); ++k) {
      position[std::to_string(entry.top[k].token)] = {{"logprob", entry.top[k].logprob}, {"rank", k + 1},
                                                      {"decoded_token", decoded(entry.top[k].token)}};
    }
    const std::string key = std::to_string(entry.token);
    if (!position.contains(key)) {
      position[key] = {{"logprob", entry.logprob}, {"rank", nullptr}, {"decoded_token", decoded(entry.token)}};
    }
    out.push_back(position);
  }
  return out;
}

std::string ResponseBuilder::role_chunk(int32_t index) const {
  json j = chunk_base();
  j["choices"] = json::array({{{"index", index}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  if (request_.include_usage) j["usage"] = nullptr;
  return sse(j);
}

std::string ResponseBuilder::chunk(const ChoiceText& d) {
  json j = chunk_base();
  size_t& offset = text_offsets_.at(d.index);
  json choice = {{"index", d.index}, {"logprobs", logprobs_json(d, offset)},
                 {"finish_reason", d.finish_reason ? json(d.finish_reason) : json(nullptr)}};
  offset += d.text.size();
  const std::vector<PromptTokenLogprob>* prompt_logprobs = &d.prompt_logprobs;
  if (request_.chat && !held_text_.empty()) {
    // The answer's text is held and goes out as it settles: the reasoning up to anything that may
    // grow into </think>; then the content up to anything that may grow into a call (tool calls go
    // out whole when their choice ends: a call's JSON must be complete to split it). The tokens'
    // logprobs wait with it and go out with the next chunk sent.
    std::string& held = held_text_.at(d.index);
    size_t& sent = content_sent_.at(d.index);
    size_t& thought = reasoning_sent_.at(d.index);
    ChoiceText& waiting = held_logprobs_.at(d.index);
    held += d.text;
    waiting.token_ids.insert(waiting.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
    waiting.logprobs.insert(waiting.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    waiting.top_logprobs.insert(waiting.top_logprobs.end(), d.top_logprobs.begin(), d.top_logprobs.end());
    waiting.prompt_logprobs.insert(waiting.prompt_logprobs.end(), d.prompt_logprobs.begin(), d.prompt_logprobs.end());
    const bool final = d.finish_reason != nullptr;
    json delta = json::object();
    std::string_view body = held;
    if (model_.reasoning_parser) {
      const ReasoningParser::Split s = model_.reasoning_parser->split(held, final);
      const size_t from = std::max(thought, s.reasoning_begin);
      if (s.reasoning_end > from) delta["reasoning_content"] = held.substr(from, s.reasoning_end - from);
      thought = std::max(thought, s.reasoning_end);
      body = s.content_begin == std::string::npos ? std::string_view() : std::string_view(held).substr(s.content_begin);
    }
    if (!final) {
      const size_t settled = request_.tool_choice == ApiRequest::ToolChoice::text     ? body.size()
                             : request_.tool_choice == ApiRequest::ToolChoice::parsed ? model_.tool_parser->settled_content(body)
                                                                                      : 0;
      if (settled > sent) delta["content"] = std::string(body.substr(sent, settled - sent));
      sent = std::max(sent, settled);
      if (delta.empty()) return "";
    } else {
      const std::string content(body);
      const char* finish = finish_reason(d, content);
      choice["finish_reason"] = finish ? json(finish) : json(nullptr);
      const auto calls = request_.tool_choice == ApiRequest::ToolChoice::text ? std::nullopt : tool_calls(content, nullptr);
      if (calls && !calls->empty()) {
        delta["tool_calls"] = answer_fields(content, true)["tool_calls"];  // what went out already is the content
      } else if (content.size() > sent) {
        delta["content"] = content.substr(sent);
      }
      sent = content.size();
    }
    choice["delta"] = std::move(delta);
    choice["logprobs"] = logprobs_json(waiting, 0);
    waiting.token_ids.clear();
    waiting.logprobs.clear();
    waiting.top_logprobs.clear();
    prompt_logprobs = &waiting.prompt_logprobs;
  } else if (request_.chat) {
    choice["delta"] = d.text.empty() && d.finish_reason ? json::object() : json{{"content", d.text}};
  } else {
    choice["text"] = d.text;
  }
  if (d.finish_reason) choice["stop_reason"] = d.stop_reason;
  if (!prompt_logprobs->empty()) choice["prompt_logprobs"] = prompt_logprobs_json(*prompt_logprobs);
  j["choices"] = json::array({choice});
  if (request_.include_usage) j["usage"] = nullptr;
  if (prompt_logprobs != &d.prompt_logprobs) held_logprobs_.at(d.index).prompt_logprobs.clear();
  return sse(j);
}

std::string ResponseBuilder::usage_chunk(const Usage& usage) const {
  json j = chunk_base();
  j["choices"] = json::array();
  j["usage"] = usage_json(usage);
  return sse(j);
}

json ResponseBuilder::response(const std::vector<ChoiceText>& choices, const Usage& usage) const {
  json j = {{"id", id_}, {"object", request_.chat ? "chat.completion" : "text_completion"}, {"created", created_},
            {"model", model_.name}};
  json out = json::array();
  for (const ChoiceText& c : choices) {
    // A chat answer: its reasoning split off (a --reasoning-parser), then content or tool calls.
    std::string body = c.text;
    json reasoning;
    if (request_.chat && model_.reasoning_parser) {
      const ReasoningParser::Split s = model_.reasoning_parser->split(c.text, true);
      if (s.content_begin != 0) reasoning = c.text.substr(s.reasoning_begin, s.reasoning_end - s.reasoning_begin);
      body = s.content_begin == std::string::npos ? "" : c.text.substr(s.content_begin);
    }
    const char* finish = finish_reason(c, body);
    json choice = {{"index", c.index}, {"logprobs", logprobs_json(c, 0)},
                   {"finish_reason", finish ? json(finish) : json(nullptr)}, {"stop_reason", c.stop_reason}};
    if (request_.chat) {
      choice["message"] = answer_fields(body, false);
      if (!reasoning.is_null()) {
        choice["message"]["reasoning_content"] = reasoning;
        if (body.empty()) choice["message"]["content"] = nullptr;  // it thought and wrote no answer
      }
    } else {
      choice["text"] = c.text;
    }
    if (request_.params.prompt_logprobs) choice["prompt_logprobs"] = prompt_logprobs_json(c.prompt_logprobs);
    out.push_back(choice);
  }
  j["choices"] = out;
  j["usage"] = usage_json(usage);
  return j;
}

}  // namespace kiln
