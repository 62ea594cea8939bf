// Normalizers from tokenizer.json applied to text between added tokens: NFC (Qwen2/Qwen3),
// Prepend and Replace (SentencePiece-style tokenizers: prepend "▁", replace " " by "▁"), and
// Sequence of these. Anything else is rejected when loading, naming the type.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/regex.hpp"

namespace kiln {

class Normalizer {
 public:
  enum class Kind { nfc, prepend, replace_string, replace_regex };
  struct Step {
    Kind kind;
    std::string text;         // prepend: the prefix; replace: the literal pattern
    std::string replacement;  // replace
    std::shared_ptr<const Regex> regex;  // replace_regex
  };

  bool empty() const { return steps_.empty(); }
  void add(Step step) { steps_.push_back(std::move(step)); }

  // Applies every step in order to valid UTF-8 text.
  std::string apply(std::string_view text) const;

 private:
  std::vector<Step> steps_;
};

// `text` with every occurrence of `from` replaced by `to`, left to right (the Replace step with a
// literal pattern; also SentencePiece's spelling of spaces as "▁" and back). Empty `from`: no change.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace kiln
