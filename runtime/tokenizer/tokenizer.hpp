// kiln::Tokenizer — text to token ids and back, for the model families kiln builds:
// byte-level BPE (Llama 3, Qwen3, DeepSeek-V2, SmolLM2 / GPT-2) from an HF tokenizer.json or GGUF
// metadata, and SentencePiece BPE with byte fallback (Llama 2 family) from GGUF or from a
// tokenizer.json (Replace/Prepend normalizers or a Metaspace pre-tokenizer).
//
// Encoding matches HF tokenizers' `encode(text, add_special_tokens=False)` (the test vectors are
// HF's ids): added tokens are matched first (special ones only when parse_special), the rest is
// normalized, pre-tokenized and BPE-merged. Invalid UTF-8 input is not an error: each maximal
// ill-formed subsequence is replaced by U+FFFD first (see utf8.hpp), so the ids are HF's ids for
// the text Python would get from bytes.decode("utf-8", "replace").
//
// Decoding is lossless: decode(encode(s)) == s for valid UTF-8 (NFC(s) for tokenizers that
// normalize to NFC, such as Qwen's), with one exception inherited from HF: a Metaspace
// pre-tokenizer prepends no "▁" to text that starts with a space, so " hi" and "hi" have the same
// ids and decode without the space. There is no clean-up of spaces before punctuation as
// transformers' clean_up_tokenization_spaces would do; added tokens decode to their content (HF's
// ByteLevel decoder would also map their characters through the byte alphabet, which garbles
// tokens like DeepSeek's user-defined "ø"); byte sequences that do not form whole characters
// become U+FFFD (maximal subparts, also for <0xXX> byte tokens, where HF's ByteFallback writes
// one U+FFFD per byte).
//
// A Tokenizer is immutable after loading and safe to use from several threads; copies share
// the loaded data.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

class GgufFile;

// Part of a text to encode: plain text, or text that may become special tokens (a chat
// template's own markers).
struct TextPiece {
  std::string_view text;
  bool special = false;
};

// Bytes [begin, end) of a text.
struct TextSpan {
  size_t begin = 0, end = 0;
};

// What a token is, in GGUF's token_type terms (HF added tokens: special -> control, plain ->
// user_defined).
enum class TokenKind : uint8_t { normal, byte, control, user_defined, unknown, unused };

class Tokenizer {
 public:
  // tokenizer.json, plus tokenizer_config.json / generation_config.json / config.json from the
  // same directory when present (BOS/EOS ids, whether BOS is added).
  static Tokenizer from_tokenizer_json(const std::string& path);
  // A Hugging Face model directory: DIR/tokenizer.json and its sibling config files.
  static Tokenizer from_model_dir(const std::string& dir);
  // GGUF `tokenizer.ggml.*` metadata; `gguf.origin()` names the file in errors.
  static Tokenizer from_gguf(const GgufFile& gguf);
  // Whether the GGUF carries a vocabulary at all: false for a file of weights only (no
  // tokenizer.ggml.tokens, or tokenizer.ggml.model "none", llama.cpp's mark for no vocabulary).
  static bool gguf_has_vocabulary(const GgufFile& gguf);
  static Tokenizer from_gguf_file(const std::string& path);

  // Token ids of `text`. add_bos prepends bos_id() (when the tokenizer has one); parse_special
  // false leaves special-token text such as "<|im_end|>" as plain text (plain added tokens are
  // always matched, as in HF).
  std::vector<int32_t> encode(std::string_view text, bool add_bos = false, bool parse_special = true) const;

  // Token ids of the concatenated pieces, where only `special` pieces may become special tokens
  // and the rest is encoded with parse_special false: text a user wrote cannot turn into control
  // tokens. The result equals encode() of the concatenation whenever the plain pieces hold no
  // special-token text (as in HF, text is split at special tokens first, so each plain piece is
  // encoded on its own; a special token's lstrip / rstrip takes the whitespace next to it).
  std::vector<int32_t> encode_pieces(std::span<const TextPiece> pieces, bool add_bos = false) const;

  // Where `text` spells special tokens (each token's own text, leftmost-longest, in order, not
  // overlapping): what encode() with parse_special would turn into control tokens.
  std::vector<TextSpan> special_token_spans(std::string_view text) const;

  // Text of `ids` (valid UTF-8). skip_special drops control and unknown tokens. Throws
  // kiln::Error for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  int32_t bos_id() const;                      // -1 when there is none
  const std::vector<int32_t>& eos_ids() const;  // end-of-generation tokens (EOS, EOT, EOM)
  bool add_bos_by_default() const;             // whether the model's own pipeline adds BOS

  int32_t token_id(std::string_view token) const;  // -1 when absent
  std::string_view token_text(int32_t id) const;   // as stored in the vocabulary ("Ġthe")
  TokenKind token_kind(int32_t id) const;
  bool is_special(int32_t id) const;  // control or unknown: what skip_special drops
  size_t vocab_size() const;          // highest id + 1

  // The bytes token `id` decodes to (possibly part of a UTF-8 character; nothing for a special
  // token when skip_special), and whether decoding drops one leading space at the start of a
  // sequence (SentencePiece's dummy prefix). These are the building blocks of decode() and
  // StreamDecoder.
  std::string_view token_bytes(int32_t id, bool skip_special = false) const;
  bool strips_leading_space() const;

  // One line for logs: model kind, vocabulary size, pre-tokenizer, BOS/EOS.
  std::string describe() const;

  // Benchmarks measure with and without the per-piece cache.
  void set_cache_enabled(bool enabled) const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<Impl> impl);
  void check_id(int32_t id) const;
  std::shared_ptr<Impl> impl_;
};

}  // namespace kiln
