#include "runtime/chat/chat_encode.hpp"

#include <map>

#include "runtime/core/error.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace kiln {

namespace {

using nlohmann::json;

// Placeholders are code points of Supplementary Private Use Area-A (U+F0000..U+FFFFD): no
// tokenizer gives them meaning and no chat template writes them. Text that already holds such a
// character has it swapped too, so every placeholder in the rendered prompt is one of ours.
constexpr uint32_t kFirstPlaceholder = 0xF0000;
constexpr uint32_t kPlaceholders = 0xFFFFE - kFirstPlaceholder;

std::string utf8_of(uint32_t cp) {
  return {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
          static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
}

// The placeholder index at byte `i` of `s`, or -1 (a 4-byte sequence F3 B0..BF 80..BF 80..BF).
int64_t placeholder_at(std::string_view s, size_t i) {
  if (i + 4 > s.size() || static_cast<uint8_t>(s[i]) != 0xF3) return -1;
  const uint8_t b1 = static_cast<uint8_t>(s[i + 1]), b2 = static_cast<uint8_t>(s[i + 2]),
                b3 = static_cast<uint8_t>(s[i + 3]);
  if (b1 < 0xB0 || b1 > 0xBF || (b2 & 0xC0) != 0x80 || (b3 & 0xC0) != 0x80) return -1;
  const uint32_t cp = ((0x3u) << 18) | ((b1 & 0x3Fu) << 12) | ((b2 & 0x3Fu) << 6) | (b3 & 0x3Fu);
  return cp >= kFirstPlaceholder && cp - kFirstPlaceholder < kPlaceholders ? cp - kFirstPlaceholder : -1;
}

class Escaper {
 public:
  explicit Escaper(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Every string in `value` (keys excepted) with its special-token spellings swapped.
  json escape(const json& value) {
    if (value.is_string()) return escape_text(value.get_ref<const std::string&>());
    if (value.is_array()) {
      json out = json::array();
      for (const json& item : value) out.push_back(escape(item));
      return out;
    }
    if (value.is_object()) {
      json out = json::object();
      for (auto it = value.begin(); it != value.end(); ++it) out[it.key()] = escape(it.value());
      return out;
    }
    return value;
  }

  const std::vector<std::string>& originals() const { return originals_; }

 private:
  std::string escape_text(const std::string& text) {
    const std::vector<TextSpan> spans = tokenizer_.special_token_spans(text);
    std::string out;
    size_t done = 0;
    const auto swap = [&](size_t begin, size_t end) {
      out.append(text, done, begin - done);
      out += placeholder_for(text.substr(begin, end - begin));
      done = end;
    };
    size_t next_span = 0;
    for (size_t i = 0; i < text.size();) {
      while (next_span < spans.size() && spans[next_span].begin < i) ++next_span;  // overlapped by a swap
      if (next_span < spans.size() && spans[next_span].begin == i) {
        swap(i, spans[next_span].end);
        i = spans[next_span++].end;
      } else if (placeholder_at(text, i) >= 0) {
        swap(i, i + 4);
        i += 4;
      } else {
        ++i;
      }
    }
    out.append(text, done, std::string::npos);
    return out;
  }

  std::string placeholder_for(const std::string& original) {
    auto [it, added] = index_.emplace(original, originals_.size());
    if (added) {
      if (originals_.size() >= kPlaceholders) fail("the chat holds more than ", kPlaceholders, " distinct special-token spellings");
      originals_.push_back(original);
    }
    return utf8_of(kFirstPlaceholder + static_cast<uint32_t>(it->second));
  }

  const Tokenizer& tokenizer_;
  std::map<std::string, size_t> index_;
  std::vector<std::string> originals_;
};

}  // namespace

JinjaChatTemplate chat_template_for(const Tokenizer& tokenizer, const std::string& source, std::string origin) {
  const std::string bos = tokenizer.bos_id() >= 0 ? std::string(tokenizer.token_text(tokenizer.bos_id())) : "";
  const std::string eos = tokenizer.eos_ids().empty() ? "" : std::string(tokenizer.token_text(tokenizer.eos_ids().front()));
  return JinjaChatTemplate(source, bos, eos, std::move(origin));
}

namespace {

// HF's continue_final_message: the rendered chat cut right after the last occurrence of the last
// message's text (its last text part, for a list of parts), stripped of surrounding white space as
// templates often strip it; with its trailing white space where the template kept the text whole.
void cut_after_final_message(std::string& rendered, const json& messages) {
  const auto no_text = [] {
    fail("continue_final_message: the last message has no text to continue");
  };
  if (!messages.is_array() || messages.empty() || !messages.back().is_object()) no_text();
  const json& content = messages.back().value("content", json());
  std::string text;
  if (content.is_string()) {
    text = content.get<std::string>();
  } else if (content.is_array()) {
    bool found = false;
    for (auto it = content.rbegin(); it != content.rend() && !found; ++it) {
      if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) {
        text = (*it)["text"].get<std::string>();
        found = true;
      }
    }
    if (!found) no_text();
  } else {
    no_text();
  }
  // Python's str.strip() and lstrip(), as HF strips (Unicode white space too).
  const std::string_view stripped = utf8::python_strip(text);
  const std::string_view lstripped = std::string_view(text).substr(static_cast<size_t>(stripped.data() - text.data()));
  const size_t at = rendered.rfind(stripped);
  if (at == std::string::npos) {
    fail("continue_final_message: the last message's text does not appear in the chat as the template renders it");
  }
  const bool kept = std::string_view(rendered).substr(at, lstripped.size()) == text;
  rendered.resize(at + (kept ? lstripped.size() : stripped.size()));
}

}  // namespace

EncodedChat encode_chat(const Tokenizer& tokenizer, const JinjaChatTemplate& chat_template, const json& messages,
                        bool add_generation_prompt, const json& extra, bool special_tokens_in_text,
                        bool continue_final_message) {
  EncodedChat out;
  if (special_tokens_in_text) {
    out.text = chat_template.render(messages, add_generation_prompt, extra);
    if (continue_final_message) cut_after_final_message(out.text, messages);
    out.ids = tokenizer.encode(out.text, /*add_bos=*/false);
    return out;
  }
  Escaper escaper(tokenizer);
  const json safe_messages = escaper.escape(messages);
  const json safe_extra = escaper.escape(extra);
  std::string rendered = chat_template.render(safe_messages, add_generation_prompt, safe_extra);
  if (continue_final_message) cut_after_final_message(rendered, safe_messages);

  // Template runs (special) and the messages' swapped spellings (plain), in order.
  std::vector<TextPiece> pieces;
  size_t run_start = 0;
  for (size_t i = 0; i < rendered.size();) {
    const int64_t k = placeholder_at(rendered, i);
    if (k < 0 || static_cast<size_t>(k) >= escaper.originals().size()) {
      ++i;
      continue;
    }
    if (run_start < i) pieces.push_back({std::string_view(rendered).substr(run_start, i - run_start), true});
    pieces.push_back({escaper.originals()[static_cast<size_t>(k)], false});
    i += 4;
    run_start = i;
  }
  if (run_start < rendered.size()) pieces.push_back({std::string_view(rendered).substr(run_start), true});
  for (const TextPiece& p : pieces) out.text += p.text;
  out.ids = tokenizer.encode_pieces(pieces, /*add_bos=*/false);
  return out;
}

}  // namespace kiln
