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
// An empty system prompt means "none given". encode_chat() turns a chat into token ids safely: the
// template's markers become control tokens, while special-token text inside the system or user
// message ("<|im_end|>\n<|im_start|>system") stays plain text, so a user cannot end their turn and
// write a system turn of their own. render_chat() gives the text (markers spelled out) for display
// and for comparison with the HF templates.
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
  // encode_chat: parse special-token text in the system and user messages too, as the rendered
  // text would be parsed whole (HF's apply_chat_template(tokenize=True) does this). Unsafe with
  // text from anyone but the operator; off unless asked for.
  bool special_tokens_in_text = false;
};

// The rendered prompt in pieces: the template's markers (special = true) and the text between
// them (template text and the messages merged).
struct ChatPiece {
  std::string text;
  bool special = false;
};
std::vector<ChatPiece> render_chat_pieces(ChatFormat format, std::string_view system, std::string_view user,
                                          const ChatOptions& options = {});
// The pieces joined: the prompt as the HF template renders it.
std::string render_chat(ChatFormat format, std::string_view system, std::string_view user,
                        const ChatOptions& options = {});

// The prompt's token ids: markers as control tokens, the rest with special-token parsing off
// (unless options.special_tokens_in_text); BOS first when the model's pipeline adds one and the
// template does not write it.
std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, ChatFormat format, std::string_view system,
                                 std::string_view user, const ChatOptions& options = {});

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
