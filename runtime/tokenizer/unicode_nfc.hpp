// Unicode Normalization Form C, for tokenizers whose tokenizer.json asks for it (Qwen2, Qwen3).
// Tables are generated from Python's unicodedata by gen_unicode_nfc.py (Unicode 14.0).
#pragma once

#include <string>
#include <string_view>

namespace kiln {

// True when `text` (valid UTF-8) is certainly unchanged by NFC: no code point in it can be
// decomposed, reordered or combined. Most text takes this path.
bool nfc_quick_check(std::string_view text);

// NFC of `text` (valid UTF-8).
std::string to_nfc(std::string_view text);

}  // namespace kiln
