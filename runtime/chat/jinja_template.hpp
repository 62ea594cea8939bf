// A model's own chat template: the Jinja text of its tokenizer_config.json ("chat_template"), its
// chat_template.jinja, or its GGUF metadata (tokenizer.chat_template), rendered as transformers'
// apply_chat_template renders it (messages, add_generation_prompt, bos_token, eos_token,
// strftime_now, raise_exception, and any extra keyword such as enable_thinking). The engine is
// minja (third_party/minja), the Jinja subset llama.cpp uses for the same purpose.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace kiln {

class GgufFile;

class JinjaChatTemplate {
 public:
  // `origin` names the template's file in errors. Throws kiln::Error when the text does not parse.
  JinjaChatTemplate(const std::string& source, std::string bos_token, std::string eos_token, std::string origin);
  ~JinjaChatTemplate();
  JinjaChatTemplate(JinjaChatTemplate&&) noexcept;
  JinjaChatTemplate& operator=(JinjaChatTemplate&&) noexcept;

  // messages: [{"role": ..., "content": string or [{"type": "text", "text": ...}], ...}]. Content
  // given as parts is joined into one string first (text parts, "\n" between them, as vLLM does).
  // `extra` holds more template variables (enable_thinking, date_string, tools, ...). Throws
  // kiln::Error naming the template for a template error or raise_exception().
  std::string render(const nlohmann::json& messages, bool add_generation_prompt,
                     const nlohmann::json& extra = nlohmann::json::object()) const;

  const std::string& source() const { return source_; }
  const std::string& origin() const { return origin_; }

 private:
  struct Parsed;
  std::string source_, bos_token_, eos_token_, origin_;
  std::unique_ptr<Parsed> parsed_;
};

// Chat messages as the templates expect them: "content" as a string. Throws kiln::Error naming the
// message and field for anything else than a list of {role, content} objects.
nlohmann::json normalize_chat_messages(const nlohmann::json& messages);

// The template text of a Hugging Face model directory: chat_template.jinja, else the
// "chat_template" of tokenizer_config.json (a string, or a list of {name, template}: "default").
// Empty when there is none.
std::string find_chat_template(const std::string& model_dir);
// GGUF tokenizer.chat_template, empty when absent.
std::string find_chat_template(const GgufFile& gguf);

}  // namespace kiln
