#include "runtime/tokenizer/stream_decoder.hpp"

namespace kiln {

StreamDecoder::StreamDecoder(Tokenizer tokenizer, bool skip_special, bool at_sequence_start)
    : tokenizer_(std::move(tokenizer)), skip_special_(skip_special), at_start_(at_sequence_start) {}

std::string StreamDecoder::push(int32_t id) {
  std::string_view piece = tokenizer_.token_bytes(id, skip_special_);  // validates id
  std::string out;
  if (piece.empty()) return out;
  if (at_start_ && tokenizer_.strips_leading_space() && piece.front() == ' ') piece.remove_prefix(1);
  at_start_ = false;
  assembler_.push(piece, out);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  assembler_.flush(out);
  return out;
}

}  // namespace kiln
