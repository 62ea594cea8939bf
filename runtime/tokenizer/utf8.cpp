#include "runtime/tokenizer/utf8.hpp"

namespace kiln::utf8 {
namespace {

// The valid range for the second byte depends on the lead byte (Unicode Table 3-7): this is what
// rules out overlong forms, surrogates and code points above U+10FFFF.
struct LeadInfo {
  uint8_t length;  // 0: not a lead byte
  uint8_t second_lo, second_hi;
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

bool continuation_ok(uint8_t lead, size_t index, uint8_t b) {
  if (index == 1) {
    const LeadInfo info = lead_info(lead);
    return b >= info.second_lo && b <= info.second_hi;
  }
  return b >= 0x80 && b <= 0xBF;
}

// Length of the valid sequence at the start of `text`, or 0 when it is ill-formed or truncated.
size_t valid_sequence_length(std::string_view text) {
  if (text.empty()) return 0;
  const uint8_t lead = static_cast<uint8_t>(text[0]);
  const LeadInfo info = lead_info(lead);
  if (info.length == 0 || text.size() < info.length) return 0;
  for (size_t i = 1; i < info.length; ++i) {
    if (!continuation_ok(lead, i, static_cast<uint8_t>(text[i]))) return 0;
  }
  return info.length;
}

// Python's str.isspace() for one code point: what Jinja's |trim and str.strip() remove. Python
// also counts the information separators U+001C..U+001F as spaces.
bool is_python_space(char32_t cp) { return is_white_space(cp) || (cp >= 0x1C && cp <= 0x1F); }

// next() for text that may not be UTF-8: the code point of the valid sequence at text[pos], pos
// moved past it; where none starts there (a stray continuation byte, a sequence cut short or
// ill-formed), U+FFFD and pos moved one byte. So the trimming below stops at bytes that are not
// a character, as at any other non-space, and never reads past `text` (next() would).
char32_t next_or_replacement(std::string_view text, size_t& pos) {
  if (valid_sequence_length(text.substr(pos)) == 0) {
    ++pos;
    return 0xFFFD;
  }
  return next(text, pos);
}

}  // namespace

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t next(std::string_view text, size_t& pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(pos);
  if (b0 < 0x80) {
    pos += 1;
    return b0;
  }
  if (b0 < 0xE0) {
    const char32_t cp = ((b0 & 0x1F) << 6) | (byte(pos + 1) & 0x3F);
    pos += 2;
    return cp;
  }
  if (b0 < 0xF0) {
    const char32_t cp = ((b0 & 0x0F) << 12) | ((byte(pos + 1) & 0x3F) << 6) | (byte(pos + 2) & 0x3F);
    pos += 3;
    return cp;
  }
  const char32_t cp = ((b0 & 0x07) << 18) | ((byte(pos + 1) & 0x3F) << 12) |
                      ((byte(pos + 2) & 0x3F) << 6) | (byte(pos + 3) & 0x3F);
  pos += 4;
  return cp;
}

bool is_valid(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII runs are the common case: skip eight bytes at a time.
    while (pos + 8 <= text.size()) {
      uint64_t word = 0;
      for (size_t i = 0; i < 8; ++i) word |= static_cast<uint64_t>(static_cast<uint8_t>(text[pos + i])) << (8 * i);
      if (word & 0x8080808080808080ULL) break;
      pos += 8;
    }
    if (pos >= text.size()) break;
    const size_t len = valid_sequence_length(text.substr(pos));
    if (len == 0) return false;
    pos += len;
  }
  return true;
}

std::string sanitize(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  Assembler assembler;
  assembler.push(text, out);
  assembler.flush(out);
  return out;
}

void Assembler::push(std::string_view bytes, std::string& out) {
  for (const char c : bytes) push_byte(static_cast<uint8_t>(c), out);
}

void Assembler::push_byte(uint8_t byte, std::string& out) {
  if (held_len_ != 0) {
    if (continuation_ok(static_cast<uint8_t>(held_[0]), held_len_, byte)) {
      held_[held_len_++] = static_cast<char>(byte);
      if (held_len_ == need_) {
        out.append(held_, held_len_);
        held_len_ = 0;
      }
      return;
    }
    // The held bytes are a maximal ill-formed subsequence; `byte` starts afresh.
    out += kReplacement;
    held_len_ = 0;
  }
  const LeadInfo info = lead_info(byte);
  if (info.length == 1) {
    out.push_back(static_cast<char>(byte));
  } else if (info.length == 0) {
    out += kReplacement;
  } else {
    held_[0] = static_cast<char>(byte);
    held_len_ = 1;
    need_ = info.length;
  }
}

void Assembler::flush(std::string& out) {
  if (held_len_ != 0) out += kReplacement;
  held_len_ = 0;
}

bool is_white_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

std::string_view trim_white_space(std::string_view text, bool front, bool back) {
  size_t begin = 0;
  while (front && begin < text.size()) {
    size_t pos = begin;
    if (!is_white_space(next_or_replacement(text, pos))) break;
    begin = pos;
  }
  size_t end = text.size();
  while (back && end > begin) {
    // The character that ends at `end`: a whole one, after `begin`, or the trimming stops.
    const size_t prev = char_start_before(text, end);
    size_t pos = prev;
    if (prev < begin || !is_white_space(next_or_replacement(text, pos)) || pos != end) break;
    end = prev;
  }
  return text.substr(begin, end - begin);
}

std::string_view python_strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t pos = begin;
    if (!is_python_space(next_or_replacement(text, pos))) break;
    begin = pos;
  }
  size_t end = begin;
  size_t pos = begin;
  while (pos < text.size()) {
    if (!is_python_space(next_or_replacement(text, pos))) end = pos;
  }
  return text.substr(begin, end - begin);
}

}  // namespace kiln::utf8
