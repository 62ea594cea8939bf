// GPT-2's byte-to-unicode alphabet: byte-level BPE vocabularies spell every byte as a printable
// code point ("Ġ" is the space byte, "Ċ" the newline), so token strings never contain raw
// whitespace or control bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::byte_level {

// UTF-8 spelling of the code point that stands for `byte` ("Ġ" for 0x20).
const std::string& byte_to_text(uint8_t byte);

// Raw bytes of a byte-level token ("Ġthe" -> " the"); nullopt when some character is not in
// the alphabet (added tokens such as "<|im_end|>" are spelled in plain text and are all in the
// alphabet; "<｜begin▁of▁sentence｜>" is not).
std::optional<std::string> text_to_bytes(std::string_view token_text);

}  // namespace kiln::byte_level
