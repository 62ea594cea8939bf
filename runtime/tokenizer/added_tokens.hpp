// Added tokens (special and plain) are found in the text before normalization and BPE, the way HF
// tokenizers' AddedVocabulary does it: leftmost-longest matching, honouring each token's
// single_word / lstrip / rstrip flags, in two passes (tokens with normalized=false on the raw
// text, tokens with normalized=true on the normalized text between them).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/tokenizer.hpp"  // TextSpan

namespace kiln {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // skipped by decode(skip_special) and by encode(parse_special=false)
  bool single_word = false;  // only matches when not inside a word
  bool lstrip = false;       // swallows whitespace on its left
  bool rstrip = false;       // swallows whitespace on its right
  bool normalized = false;   // matched on normalized text (second pass)
};

// A piece of the input: either text [begin, end) or one added token.
struct TextSegment {
  int32_t token = -1;  // -1: text
  size_t begin = 0, end = 0;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher();
  ~AddedTokenMatcher();
  AddedTokenMatcher(AddedTokenMatcher&&) noexcept;
  AddedTokenMatcher& operator=(AddedTokenMatcher&&) noexcept;

  // Tokens with empty content are ignored.
  void add(const AddedToken& token);
  bool has_normalized() const;
  // The added token whose content is `content`, or null.
  const AddedToken* find(std::string_view content) const;

  // Splits `text` for the raw pass (normalized=false tokens) or the normalized pass. With
  // parse_special false, special tokens are not matched: like HF's encode_special_tokens, a
  // special token's text then stays plain text.
  void split(std::string_view text, bool normalized_pass, bool parse_special, std::vector<TextSegment>& out) const;

  // The special tokens' own text in `text` (both passes' tokens matched on the raw text,
  // leftmost-longest, without the strip flags): the spans a chat message must not turn into
  // control tokens (runtime/chat/chat_encode.hpp).
  std::vector<TextSpan> special_spans(std::string_view text) const;

 private:
  struct Trie;
  std::unique_ptr<Trie> raw_, normalized_;
  std::vector<AddedToken> tokens_;
};

}  // namespace kiln
