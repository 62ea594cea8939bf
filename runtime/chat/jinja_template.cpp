#include "runtime/chat/jinja_template.hpp"

#include <ctime>
#include <filesystem>

#include "runtime/core/error.hpp"
#include "runtime/core/file_io.hpp"
#include "runtime/tokenizer/utf8.hpp"
#include "runtime/weights/gguf.hpp"
#include "runtime/core/strict_json.hpp"

// minja.hpp is third-party code: its warnings are not ours to fix.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wextra"
#pragma GCC diagnostic ignored "-Wall"
#include "third_party/minja/minja.hpp"
#pragma GCC diagnostic pop

namespace kiln {

using nlohmann::json;

struct JinjaChatTemplate::Parsed {
  std::shared_ptr<minja::TemplateNode> root;
};

JinjaChatTemplate::JinjaChatTemplate(const std::string& source, std::string bos_token, std::string eos_token,
                                     std::string origin)
    : source_(source), bos_token_(std::move(bos_token)), eos_token_(std::move(eos_token)),
      origin_(std::move(origin)), parsed_(std::make_unique<Parsed>()) {
  try {
    // Hugging Face renders with trim_blocks and lstrip_blocks on; keep_trailing_newline off.
    parsed_->root = minja::Parser::parse(source_, {.trim_blocks = true, .lstrip_blocks = true, .keep_trailing_newline = false});
  } catch (const std::exception& e) {
    fail(origin_, ": the chat template does not parse: ", e.what());
  }
}

JinjaChatTemplate::~JinjaChatTemplate() = default;
JinjaChatTemplate::JinjaChatTemplate(JinjaChatTemplate&&) noexcept = default;
JinjaChatTemplate& JinjaChatTemplate::operator=(JinjaChatTemplate&&) noexcept = default;

json normalize_chat_messages(const json& messages) {
  if (!messages.is_array() || messages.empty()) fail("'messages' must be a non-empty array of {role, content} objects");
  json out = json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) fail(where, " must be an object with 'role' and 'content'");
    if (!m.contains("role") || !m["role"].is_string()) fail(where, ".role must be a string");
    json copy = m;
    if (!m.contains("content") || m["content"].is_null()) {
      copy["content"] = "";
    } else if (m["content"].is_array()) {
      std::string text;
      for (size_t p = 0; p < m["content"].size(); ++p) {
        const json& part = m["content"][p];
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string()) {
          fail(where, ".content[", p, "] must be {\"type\": \"text\", \"text\": ...}: this model takes text only");
        }
        if (!text.empty()) text += "\n";
        text += part["text"].get<std::string>();
      }
      copy["content"] = text;
    } else if (!m["content"].is_string()) {
      fail(where, ".content must be a string or a list of text parts");
    }
    // A call's arguments come back from the API as JSON text; templates write them with tojson
    // (Llama 3.1's, Qwen's), which would quote the text again: give them the object, as vLLM does.
    if (copy.contains("tool_calls") && copy["tool_calls"].is_array()) {
      for (json& call : copy["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object() ||
            !call["function"].contains("arguments")) {
          continue;
        }
        json& arguments = call["function"]["arguments"];
        if (!arguments.is_string()) continue;
        try {
          json parsed = parse_json_strict(arguments.get<std::string>(), where + ".tool_calls[].function.arguments");
          if (parsed.is_object()) arguments = std::move(parsed);
        } catch (const Error&) {
          // not JSON: the template gets the text as it came
        }
      }
    }
    out.push_back(std::move(copy));
  }
  return out;
}

std::string JinjaChatTemplate::render(const json& messages, bool add_generation_prompt, const json& extra) const {
  json vars = extra.is_object() ? extra : json::object();
  vars["messages"] = normalize_chat_messages(messages);
  vars["add_generation_prompt"] = add_generation_prompt;
  vars["bos_token"] = bos_token_;
  vars["eos_token"] = eos_token_;
  try {
    // minja works on ordered_json (object keys keep their order, as in Python dicts).
    auto context = minja::Context::make(minja::Value(nlohmann::ordered_json::parse(vars.dump())));
    // transformers defines strftime_now (the current local time) for templates such as Llama 3.x's.
    context->set("strftime_now", minja::Value::callable([](const std::shared_ptr<minja::Context>&, minja::ArgumentsValue& args) {
      args.expectArgs("strftime_now", {1, 1}, {0, 0});
      const std::string format = args.args[0].get<std::string>();
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buffer[256];
      const size_t n = std::strftime(buffer, sizeof buffer, format.c_str(), &local);
      return minja::Value(std::string(buffer, n));
    }));
    // Python's str.strip() (jinja2's trim) removes Unicode whitespace such as U+00A0; minja's own
    // trim only ASCII.
    context->set("trim", minja::Value::callable([](const std::shared_ptr<minja::Context>&, minja::ArgumentsValue& args) {
      args.expectArgs("trim", {1, 1}, {0, 0});
      return minja::Value(utf8::python_strip(args.args[0].get<std::string>()));
    }));
    return parsed_->root->render(context);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(origin_, ": rendering the chat template failed: ", e.what());
  }
}

std::string find_chat_template(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const fs::path dir(model_dir);
  if (fs::exists(dir / "chat_template.jinja")) return read_file((dir / "chat_template.jinja").string());
  const fs::path config = dir / "tokenizer_config.json";
  if (!fs::exists(config)) return "";
  const json j = read_json_file(config.string());
  if (!j.is_object() || !j.contains("chat_template") || j["chat_template"].is_null()) return "";
  const json& t = j["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const json& named : t) {
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string()) {
        return named["template"].get<std::string>();
      }
    }
    fail(config.string(), ": chat_template is a list without a template named \"default\"");
  }
  fail(config.string(), ": chat_template must be a string or a list of {name, template}");
}

std::string find_chat_template(const GgufFile& gguf) {
  return gguf.has("tokenizer.chat_template") ? gguf.get_string("tokenizer.chat_template") : "";
}

}  // namespace kiln
