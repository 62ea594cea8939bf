// Pre-tokenization: splitting normalized text into the pieces BPE runs on, as tokenizer.json's
// pre_tokenizer does (Split, ByteLevel, Digits, Sequence), or as llama.cpp does for a GGUF
// `tokenizer.ggml.pre` name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/tokenizer/regex.hpp"

namespace kiln {

// HF tokenizers' SplitDelimiterBehavior: what happens to the text a pattern matches.
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// Pieces of one text segment. Spans index into `buffer`, which is the segment itself unless a
// step inserted text (ByteLevel's add_prefix_space).
struct Pieces {
  std::string buffer;
  std::vector<std::pair<uint32_t, uint32_t>> spans;  // [begin, end) in buffer, never empty
  std::string_view operator[](size_t i) const {
    return std::string_view(buffer).substr(spans[i].first, spans[i].second - spans[i].first);
  }
  size_t size() const { return spans.size(); }
};

class PreTokenizer {
 public:
  struct Step {
    enum class Kind { split, prefix_space } kind = Kind::split;
    std::shared_ptr<const Regex> regex;  // split
    SplitBehavior behavior = SplitBehavior::isolated;
    bool invert = false;
  };

  // The GPT-2 pattern HF's ByteLevel pre-tokenizer uses when use_regex is true.
  static const std::string& gpt2_pattern();

  // llama.cpp's pre-tokenizer for a GGUF `tokenizer.ggml.pre` name (byte-level BPE). Throws,
  // listing the supported names, for any other. `ignore_merges` and `nfc` report the settings
  // that go with the name (Llama 3 looks whole words up first; Qwen2 normalizes to NFC).
  static PreTokenizer for_gguf_name(const std::string& name, const std::string& origin, bool& ignore_merges,
                                    bool& nfc);

  void add_split(const std::string& pattern, SplitBehavior behavior, bool invert, const std::string& origin);
  void add_prefix_space();
  bool empty() const { return steps_.empty(); }

  // Splits `segment` (valid UTF-8) into `out` (cleared first).
  void split(std::string_view segment, Pieces& out) const;

 private:
  std::vector<Step> steps_;
};

}  // namespace kiln
