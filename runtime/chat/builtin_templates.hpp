// Jinja chat templates for models whose files carry none (a tokenizer.json without
// tokenizer_config.json, a GGUF without tokenizer.chat_template): the config's chat_template
// format (chatml, llama3, deepseek), written as those models' own templates render it.
#pragma once

#include <string>
#include <string_view>

namespace kiln {

// Empty for "none"; throws kiln::Error for an unknown format. chatml puts `default_system` first
// when a conversation has no system message and default_system is not empty (SmolLM2-Instruct).
std::string builtin_chat_template(std::string_view format, std::string_view default_system);

}  // namespace kiln
