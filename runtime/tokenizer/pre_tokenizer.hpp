// Pre-tokenization: splitting normalized text into the pieces BPE runs on, as tokenizer.json's
// pre_tokenizer does (Split, ByteLevel, Digits, Metaspace, Sequence), or as llama.cpp does for a
// GGUF `tokenizer.ggml.pre` name.
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

// HF Metaspace's prepend_scheme: which pieces get a "▁" in front (unless they start with one).
// `first` means only the piece at the very start of the input, not one after an added token.
enum class PrependScheme { always, first, never };

// Pieces of one text segment. Spans index into `buffer`, which is the segment itself unless a
// step rewrote it (ByteLevel's add_prefix_space, Metaspace).
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
    enum class Kind { split, prefix_space, metaspace } kind = Kind::split;
    std::shared_ptr<const Regex> regex;  // split
    SplitBehavior behavior = SplitBehavior::isolated;
    bool invert = false;
    PrependScheme prepend = PrependScheme::always;  // metaspace
    bool split_at_metaspace = true;                 // metaspace
  };

  // What goes with a GGUF `tokenizer.ggml.pre` name besides its splits, as llama.cpp sets it.
  struct GgufSettings {
    bool ignore_merges = false;  // a piece that is itself a token is emitted whole (Llama 3)
    bool nfc = false;            // normalize to NFC first, as the model's tokenizer.json does (Qwen)
    bool add_bos = false;        // llama.cpp's default for tokenizer.ggml.add_bos_token
  };

  // The GPT-2 pattern HF's ByteLevel pre-tokenizer uses when use_regex is true.
  static const std::string& gpt2_pattern();

  // llama.cpp's pre-tokenizer for a GGUF `tokenizer.ggml.pre` name (byte-level BPE), and its
  // settings. Throws for any other name: for one llama.cpp knows but kiln cannot run, saying why;
  // otherwise listing the supported names. The table is in gguf_pre_tokenizers.cpp.
  static PreTokenizer for_gguf_name(const std::string& name, const std::string& origin, GgufSettings& settings);

  void add_split(const std::string& pattern, SplitBehavior behavior, bool invert, const std::string& origin);
  void add_prefix_space();
  // HF Metaspace with replacement "▁": spaces become "▁", "▁" is prepended per `prepend`, and with
  // `split` every "▁" starts a new piece.
  void add_metaspace(PrependScheme prepend, bool split);
  bool empty() const { return steps_.empty(); }

  // Splits `segment` (valid UTF-8) into `out` (cleared first). `at_input_start`: the segment begins
  // the text being encoded (it follows no added token), which Metaspace's `first` scheme asks.
  void split(std::string_view segment, Pieces& out, bool at_input_start) const;

 private:
  std::vector<Step> steps_;
};

}  // namespace kiln
