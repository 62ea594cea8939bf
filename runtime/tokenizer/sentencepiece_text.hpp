// How SentencePiece-style vocabularies spell what plain tokens cannot: "▁" (U+2581) for a space
// and "<0xXX>" for a raw byte (byte fallback). Shared by the SentencePiece model, BPE with byte
// fallback and both loaders.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/tokenizer/string_map.hpp"

namespace kiln {

inline constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // "▁" U+2581

// 0x0A -> "<0x0A>" (upper-case hex, as SentencePiece and llama.cpp write them).
std::string byte_token_text(uint8_t byte);

// "<0x0A>" -> 0x0A (either case of hex digit); -1 when `text` is not a byte token.
int parse_byte_token(std::string_view text);

// The id of each byte's "<0xXX>" token in `vocab`, -1 where the vocabulary has none.
std::array<int32_t, 256> byte_token_ids(const StringMap<int32_t>& vocab);

}  // namespace kiln
