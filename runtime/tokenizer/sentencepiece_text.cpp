#include "runtime/tokenizer/sentencepiece_text.hpp"

namespace kiln {

std::string byte_token_text(uint8_t byte) {
  constexpr char kHex[] = "0123456789ABCDEF";
  return {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 0xF], '>'};
}

int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (const char c : text.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') value |= c - '0';
    else if (c >= 'A' && c <= 'F') value |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') value |= c - 'a' + 10;
    else return -1;
  }
  return value;
}

std::array<int32_t, 256> byte_token_ids(const StringMap<int32_t>& vocab) {
  std::array<int32_t, 256> ids;
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab.find(byte_token_text(static_cast<uint8_t>(b)));
    ids[b] = it == vocab.end() ? -1 : it->second;
  }
  return ids;
}

}  // namespace kiln
