#include "runtime/server/tool_parser.hpp"

#include <nlohmann/json.hpp>
#include <optional>

#include "runtime/core/error.hpp"
#include "runtime/core/strict_json.hpp"
#include "runtime/server/partial_tag.hpp"
#include "runtime/server/pythonic_calls.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace kiln {
namespace {

using ojson = nlohmann::ordered_json;

// Python's str.strip(), as vLLM's parsers strip what surrounds a call.
std::string_view trim(std::string_view s) { return utf8::python_strip(s); }

// A JSON value from a model's text, checked as strictly as any JSON kiln reads (depth, numbers),
// in its own key order; nullopt when it does not parse.
std::optional<ojson> parse_json(std::string_view text) {
  try {
    return parse_ordered_json_strict(text, "a tool call");
  } catch (const Error&) {
    return std::nullopt;
  }
}

// {"name": ..., "<arguments_key>": {...}} as a call; false when it is not one.
bool add_call(const ojson& v, std::initializer_list<const char*> argument_keys, std::vector<ToolCall>& calls) {
  if (!v.is_object() || !v.contains("name") || !v["name"].is_string()) return false;
  for (const char* key : argument_keys) {
    if (!v.contains(key)) continue;
    const ojson& a = v[key];
    if (a.is_object()) {
      calls.push_back({v["name"].get<std::string>(), a.dump()});
      return true;
    }
    if (a.is_string()) {  // arguments written as JSON text
      const std::optional<ojson> inner = parse_json(a.get<std::string>());
      if (!inner || !inner->is_object()) return false;
      calls.push_back({v["name"].get<std::string>(), inner->dump()});
      return true;
    }
    return false;
  }
  calls.push_back({v["name"].get<std::string>(), "{}"});  // a call without arguments
  return true;
}

class HermesParser : public ToolCallParser {
 public:
  ParsedAnswer parse(std::string_view text) const override {
    ParsedAnswer out;
    size_t at = text.find(kOpen);
    if (at == std::string_view::npos) {
      out.content = std::string(trim(text));
      return out;
    }
    std::string content(text.substr(0, at));
    while (at != std::string_view::npos) {
      const size_t body = at + kOpen.size();
      const size_t close = text.find(kClose, body);
      // The last block may stop without its closing tag (the model ended its turn there).
      const std::string_view block = text.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body);
      const std::optional<ojson> v = parse_json(trim(block));
      bool ok = v.has_value();
      if (ok && v->is_array()) {
        for (const ojson& c : *v) ok = ok && add_call(c, {"arguments", "parameters"}, out.calls);
      } else if (ok) {
        ok = add_call(*v, {"arguments", "parameters"}, out.calls);
      }
      if (!ok) return ParsedAnswer{std::string(trim(text)), {}};  // not a call after all: all of it is text
      if (close == std::string_view::npos) break;
      const size_t next = text.find(kOpen, close + kClose.size());
      content += text.substr(close + kClose.size(), next == std::string_view::npos ? std::string_view::npos
                                                                                   : next - close - kClose.size());
      at = next;
    }
    out.content = std::string(trim(content));
    return out;
  }

  size_t settled_content(std::string_view text) const override {
    const size_t at = text.find(kOpen);
    return at != std::string_view::npos ? at : text.size() - partial_tag(text, kOpen);
  }

 private:
  static constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
};

class Llama3JsonParser : public ToolCallParser {
 public:
  ParsedAnswer parse(std::string_view text) const override {
    std::string_view s = trim(text);
    if (s.substr(0, kPythonTag.size()) == kPythonTag) s = trim(s.substr(kPythonTag.size()));
    ParsedAnswer out;
    if (s.empty() || s.front() != '{') {
      out.content = std::string(trim(text));
      return out;
    }
    // Calls separated by ";" outside strings and braces.
    size_t start = 0, depth = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i <= s.size(); ++i) {
      const char c = i < s.size() ? s[i] : ';';
      if (in_string) {
        if (escaped) {
          escaped = false;
        } else if (c == '\\') {
          escaped = true;
        } else if (c == '"') {
          in_string = false;
        }
        if (i < s.size()) continue;
      }
      if (c == '"') in_string = true;
      if (c == '{' || c == '[') ++depth;
      if ((c == '}' || c == ']') && depth > 0) --depth;
      if (c == ';' && (depth == 0 || i == s.size())) {
        const std::optional<ojson> v = parse_json(trim(s.substr(start, i - start)));
        if (!v || !add_call(*v, {"parameters", "arguments"}, out.calls)) return ParsedAnswer{std::string(trim(text)), {}};
        start = i + 1;
      }
    }
    return out;
  }

  size_t settled_content(std::string_view text) const override {
    const size_t at = text.find_first_not_of(" \t\r\n");
    if (at == std::string_view::npos) return 0;  // only whitespace yet: a call may follow
    const std::string_view rest = text.substr(at);
    const bool call = rest.front() == '{' || rest.substr(0, kPythonTag.size()) == kPythonTag ||
                      kPythonTag.substr(0, rest.size()) == rest;
    return call ? 0 : text.size();  // a call is the whole answer: either all of it is held or none
  }

 private:
  static constexpr std::string_view kPythonTag = "<|python_tag|>";
};

// A whole answer that begins with "[" (pythonic_calls.hpp).
class PythonicParser : public ToolCallParser {
 public:
  ParsedAnswer parse(std::string_view text) const override {
    const std::string_view s = trim(text);
    if (!s.empty() && s.front() == '[') {
      if (std::optional<std::vector<ToolCall>> calls = parse_pythonic_calls(s)) return ParsedAnswer{"", std::move(*calls)};
    }
    return ParsedAnswer{std::string(s), {}};
  }

  size_t settled_content(std::string_view text) const override {
    const size_t at = text.find_first_not_of(" \t\r\n");
    if (at == std::string_view::npos) return 0;  // only whitespace yet: a call may follow
    return text[at] == '[' ? 0 : text.size();    // a call list is the whole answer
  }
};

}  // namespace

std::unique_ptr<ToolCallParser> ToolCallParser::make(const std::string& name) {
  if (name == "hermes") return std::make_unique<HermesParser>();
  if (name == "llama3_json") return std::make_unique<Llama3JsonParser>();
  if (name == "pythonic") return std::make_unique<PythonicParser>();
  fail("tool call parser '", name, "' is not one of hermes (Qwen2.5, Qwen3, SmolLM2), llama3_json (Llama 3.1, 3.2), "
       "pythonic (Llama 3.2, Llama 4)");
}

}  // namespace kiln
