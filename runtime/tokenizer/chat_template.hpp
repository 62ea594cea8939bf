// Chat prompts for one system + one user message, rendered exactly as the models' Hugging Face
// chat templates render them with add_generation_prompt=True (checked against the Jinja templates
// by tests/tokenizer/gen/gen_chat_expectations.py):
//
//   chatml    <|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n
//             Qwen3: no system block when the system prompt is empty; enable_thinking=false adds
//             "<think>\n\n</think>\n\n". SmolLM2-Instruct: an empty system prompt is replaced by
//             kSmolLM2DefaultSystem (set ChatOptions::default_system).
//   llama3    <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date:
//             December 2023\nToday Date: {date}\n\n{system}<|eot_id|><|start_header_id|>user
//             <|end_header_id|>\n\n{user}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n
//             (Llama 3.1 / 3.2; system and user are stripped of surrounding whitespace).
//   deepseek  <｜begin▁of▁sentence｜>{system}\n\nUser: {user}\n\nAssistant:   (DeepSeek-V2 / V2-Lite
//             Chat; "{system}\n\n" only when a system prompt is given).
//
// An empty system prompt means "none given". Rendered text contains special tokens as text:
// encode it with parse_special (the default) and without add_bos — chat_renders_bos() says whether
// the BOS is already in the text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

class Tokenizer;

enum class ChatFormat { chatml, llama3, deepseek };

inline constexpr std::string_view kSmolLM2DefaultSystem =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

struct ChatOptions {
  std::string default_system;               // chatml: used when the system prompt is empty
  std::string date_string = "26 Jul 2024";  // llama3: "Today Date" (3.1's fixed date, 3.2's fallback)
  bool enable_thinking = true;              // chatml (Qwen3): false appends an empty think block
};

std::string render_chat(ChatFormat format, std::string_view system, std::string_view user,
                        const ChatOptions& options = {});

// True when the rendered text starts with the model's BOS token (llama3, deepseek).
bool chat_renders_bos(ChatFormat format);

// The tokens that end the assistant's turn and are present in `tokenizer`: the format's
// end-of-turn token (<|im_end|>, <|eot_id|>, <｜end▁of▁sentence｜>) and the tokenizer's EOS ids.
std::vector<int32_t> chat_stop_ids(ChatFormat format, const Tokenizer& tokenizer);

// The format whose special tokens `tokenizer` has, if exactly one matches.
std::optional<ChatFormat> guess_chat_format(const Tokenizer& tokenizer);

std::string_view chat_format_name(ChatFormat format);
// "chatml", "llama3" or "deepseek"; throws kiln::Error listing them for anything else.
ChatFormat parse_chat_format(std::string_view name);

}  // namespace kiln
