#include "runtime/tokenizer/byte_level.hpp"

#include <array>

#include "runtime/tokenizer/utf8.hpp"

namespace kiln::byte_level {
namespace {

// UTF-8 spelling of each byte's code point.
struct Alphabet {
  std::array<std::string, 256> text{};

  Alphabet() {
    // Printable Latin-1 bytes stand for themselves; the other 68 bytes take the code points from
    // U+0100 upwards, in byte order (GPT-2's bytes_to_unicode).
    char32_t next_free = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      utf8::append(text[b], printable ? static_cast<char32_t>(b) : next_free++);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet instance;
  return instance;
}

// The byte a code point stands for, if it is one of the 256 in the alphabet.
std::optional<uint8_t> code_point_to_byte(char32_t cp) {
  if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) {
    return static_cast<uint8_t>(cp);
  }
  if (cp < 0x100 || cp >= 0x100 + 68) return std::nullopt;
  // The remapped bytes, in order: 0x00-0x20, 0x7F-0xA0, 0xAD.
  const uint32_t index = cp - 0x100;
  if (index <= 0x20) return static_cast<uint8_t>(index);
  if (index <= 0x20 + (0xA0 - 0x7F + 1)) return static_cast<uint8_t>(0x7F + index - 0x21);
  return static_cast<uint8_t>(0xAD);
}

}  // namespace

const std::string& byte_to_text(uint8_t byte) { return alphabet().text[byte]; }

std::optional<std::string> text_to_bytes(std::string_view token_text) {
  if (!utf8::is_valid(token_text)) return std::nullopt;
  std::string bytes;
  bytes.reserve(token_text.size());
  for (size_t pos = 0; pos < token_text.size();) {
    const auto byte = code_point_to_byte(utf8::next(token_text, pos));
    if (!byte) return std::nullopt;
    bytes.push_back(static_cast<char>(*byte));
  }
  return bytes;
}

}  // namespace kiln::byte_level
