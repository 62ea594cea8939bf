// Incremental detokenization for streaming generated text: push one token id, get the text that
// is now complete. Bytes of a character split across tokens are held back until the character is
// complete, so every returned string is valid UTF-8; byte sequences that cannot form a character
// become U+FFFD exactly as Tokenizer::decode would render them. The concatenation of every push()
// and the final flush() equals Tokenizer::decode of all ids pushed.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/tokenizer/tokenizer.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace kiln {

class StreamDecoder {
 public:
  // `at_sequence_start`: the first token begins the text, so a SentencePiece dummy-prefix space is
  // dropped as decode() does. Pass false when continuing after a prompt (generated text that
  // starts with "▁Hello" then streams as " Hello").
  explicit StreamDecoder(Tokenizer tokenizer, bool skip_special = false, bool at_sequence_start = true);

  std::string push(int32_t id);  // throws kiln::Error for an id outside the vocabulary
  std::string flush();           // held bytes of an incomplete character, as U+FFFD
  bool holding() const { return assembler_.holding(); }

 private:
  Tokenizer tokenizer_;
  bool skip_special_;
  bool at_start_;
  utf8::Assembler assembler_;
};

}  // namespace kiln
