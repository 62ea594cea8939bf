// UTF-8 helpers shared by the tokenizer: decoding code points, and turning arbitrary bytes into
// valid UTF-8.
//
// Invalid input is never an error. Each maximal ill-formed subsequence becomes one U+FFFD, the
// Unicode "best practice" that Rust's String::from_utf8_lossy and Python's
// bytes.decode("utf-8", "replace") follow. So encoding invalid bytes gives the ids HF tokenizers
// gives for the replaced text, and decode() of byte tokens that do not form whole characters
// gives what HF's decode gives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

void append(std::string& out, char32_t cp);

// Decodes the code point at text[pos] and advances pos. `text` must be valid UTF-8.
char32_t next(std::string_view text, size_t& pos);

inline bool is_continuation(char byte) { return (static_cast<uint8_t>(byte) & 0xC0) == 0x80; }

// End of the character that starts at text[pos] (pos < text.size()): past its continuation
// bytes. Never reads beyond `text`, whatever the bytes are.
inline size_t char_end(std::string_view text, size_t pos) {
  size_t end = pos + 1;
  while (end < text.size() && is_continuation(text[end])) ++end;
  return end;
}

// Start of the character that ends just before text[pos] (pos > 0).
inline size_t char_start_before(std::string_view text, size_t pos) {
  do {
    --pos;
  } while (pos > 0 && is_continuation(text[pos]));
  return pos;
}

bool is_valid(std::string_view text);

// `text` with every maximal ill-formed subsequence replaced by U+FFFD.
std::string sanitize(std::string_view text);

// Incremental form of sanitize(): bytes go in as they arrive, complete characters come out, and
// an incomplete but so far valid sequence is held back until it completes or proves invalid.
// Concatenating every push() and the final flush() equals sanitize() of all bytes pushed.
class Assembler {
 public:
  void push(std::string_view bytes, std::string& out);
  void flush(std::string& out);  // a held incomplete sequence becomes U+FFFD
  bool holding() const { return held_len_ != 0; }

 private:
  void push_byte(uint8_t byte, std::string& out);
  char held_[4] = {};
  uint8_t held_len_ = 0;
  uint8_t need_ = 0;  // total length of the sequence being held
};

// Unicode White_Space: Rust regex's \s, what HF's lstrip / rstrip of added tokens remove.
bool is_white_space(char32_t cp);
// `text` without Unicode White_Space at its front and/or back. Any bytes: a byte that is not part
// of a whole character is not white space, and nothing past `text` is read.
std::string_view trim_white_space(std::string_view text, bool front, bool back);

// `text` without leading and trailing Python whitespace (Jinja's |trim). Any bytes, as above.
std::string_view python_strip(std::string_view text);

}  // namespace kiln::utf8
