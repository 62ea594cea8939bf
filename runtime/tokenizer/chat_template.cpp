#include "runtime/tokenizer/chat_template.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"
#include "runtime/tokenizer/tokenizer.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace kiln {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kBeginOfText = "<|begin_of_text|>";
constexpr std::string_view kStartHeader = "<|start_header_id|>";
constexpr std::string_view kEndHeader = "<|end_header_id|>";
constexpr std::string_view kEotId = "<|eot_id|>";
constexpr std::string_view kDeepSeekBos = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
constexpr std::string_view kDeepSeekEos = "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";

// The rendered prompt as it grows: the template's markers as special pieces, everything else
// (template text, system and user text) merged into plain pieces between them.
class Pieces {
 public:
  Pieces& marker(std::string_view text) {
    pieces_.push_back({std::string(text), true});
    return *this;
  }
  Pieces& text(std::string_view text) {
    if (pieces_.empty() || pieces_.back().special) pieces_.push_back({std::string(), false});
    pieces_.back().text.append(text);
    return *this;
  }
  std::vector<ChatPiece> take() { return std::move(pieces_); }

 private:
  std::vector<ChatPiece> pieces_;
};

std::vector<ChatPiece> render_chatml(std::string_view system, std::string_view user, const ChatOptions& options) {
  Pieces out;
  const std::string_view effective_system = system.empty() ? std::string_view(options.default_system) : system;
  if (!effective_system.empty()) out.marker(kImStart).text("system\n").text(effective_system).marker(kImEnd).text("\n");
  out.marker(kImStart).text("user\n").text(user).marker(kImEnd).text("\n");
  out.marker(kImStart).text("assistant\n");
  // <think> is a plain (not special) added token in Qwen3: matched in plain text too.
  if (!options.enable_thinking) out.text("<think>\n\n</think>\n\n");
  return out.take();
}

std::vector<ChatPiece> render_llama3(std::string_view system, std::string_view user, const ChatOptions& options) {
  Pieces out;
  out.marker(kBeginOfText);
  out.marker(kStartHeader).text("system").marker(kEndHeader).text("\n\n");
  out.text("Cutting Knowledge Date: December 2023\n");
  out.text("Today Date: ").text(options.date_string).text("\n\n");
  out.text(utf8::python_strip(system)).marker(kEotId);
  out.marker(kStartHeader).text("user").marker(kEndHeader).text("\n\n");
  out.text(utf8::python_strip(user)).marker(kEotId);
  out.marker(kStartHeader).text("assistant").marker(kEndHeader).text("\n\n");
  return out.take();
}

std::vector<ChatPiece> render_deepseek(std::string_view system, std::string_view user) {
  Pieces out;
  out.marker(kDeepSeekBos);
  if (!system.empty()) out.text(system).text("\n\n");
  out.text("User: ").text(user).text("\n\n").text("Assistant:");
  return out.take();
}

}  // namespace

std::vector<ChatPiece> render_chat_pieces(ChatFormat format, std::string_view system, std::string_view user,
                                          const ChatOptions& options) {
  // The templates work on Python strings: make the input valid UTF-8 first.
  const std::string clean_system = utf8::sanitize(system);
  const std::string clean_user = utf8::sanitize(user);
  switch (format) {
    case ChatFormat::chatml: return render_chatml(clean_system, clean_user, options);
    case ChatFormat::llama3: return render_llama3(clean_system, clean_user, options);
    case ChatFormat::deepseek: return render_deepseek(clean_system, clean_user);
  }
  fail("render_chat: unknown chat format ", static_cast<int>(format));
}

std::string render_chat(ChatFormat format, std::string_view system, std::string_view user,
                        const ChatOptions& options) {
  std::string out;
  for (const ChatPiece& piece : render_chat_pieces(format, system, user, options)) out += piece.text;
  return out;
}

std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, ChatFormat format, std::string_view system,
                                 std::string_view user, const ChatOptions& options) {
  const bool add_bos = !chat_renders_bos(format) && tokenizer.add_bos_by_default();
  if (options.special_tokens_in_text) return tokenizer.encode(render_chat(format, system, user, options), add_bos);
  const std::vector<ChatPiece> pieces = render_chat_pieces(format, system, user, options);
  std::vector<TextPiece> text;
  text.reserve(pieces.size());
  for (const ChatPiece& piece : pieces) text.push_back({piece.text, piece.special});
  return tokenizer.encode_pieces(text, add_bos);
}

bool chat_renders_bos(ChatFormat format) { return format != ChatFormat::chatml; }

std::vector<int32_t> chat_stop_ids(ChatFormat format, const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  const auto add = [&](int32_t id) {
    if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  switch (format) {
    case ChatFormat::chatml: add(tokenizer.token_id(kImEnd)); break;
    case ChatFormat::llama3: add(tokenizer.token_id(kEotId)); break;
    case ChatFormat::deepseek: add(tokenizer.token_id(kDeepSeekEos)); break;
  }
  for (const int32_t id : tokenizer.eos_ids()) add(id);
  return ids;
}

std::optional<ChatFormat> guess_chat_format(const Tokenizer& tokenizer) {
  const bool chatml = tokenizer.token_id(kImStart) >= 0 && tokenizer.token_id(kImEnd) >= 0;
  const bool llama3 = tokenizer.token_id(kStartHeader) >= 0 && tokenizer.token_id(kEotId) >= 0;
  const bool deepseek = tokenizer.token_id(kDeepSeekBos) >= 0 && tokenizer.token_id(kDeepSeekEos) >= 0;
  if (chatml + llama3 + deepseek != 1) return std::nullopt;
  return chatml ? ChatFormat::chatml : llama3 ? ChatFormat::llama3 : ChatFormat::deepseek;
}

std::string_view chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::chatml: return "chatml";
    case ChatFormat::llama3: return "llama3";
    case ChatFormat::deepseek: return "deepseek";
  }
  return "unknown";
}

ChatFormat parse_chat_format(std::string_view name) {
  for (const ChatFormat format : {ChatFormat::chatml, ChatFormat::llama3, ChatFormat::deepseek}) {
    if (name == chat_format_name(format)) return format;
  }
  fail("chat format '", name, "' is unknown; expected chatml, llama3 or deepseek");
}

}  // namespace kiln
