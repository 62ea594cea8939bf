// The loaded form of a Tokenizer, shared by the loaders (tokenizer.json, GGUF) and the
// encode/decode code. Not part of the public API.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tokenizer/added_tokens.hpp"
#include "runtime/tokenizer/bpe.hpp"
#include "runtime/tokenizer/normalizer.hpp"
#include "runtime/tokenizer/pre_tokenizer.hpp"
#include "runtime/tokenizer/spm.hpp"
#include "runtime/tokenizer/string_map.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace kiln {

struct Tokenizer::Impl {
  std::string origin;  // file the tokenizer came from, for messages
  std::string kind;    // "byte-level BPE", "BPE", "SentencePiece BPE"

  // Vocabulary, indexed by id (holes, if any, have empty text and kind unused).
  std::vector<std::string> texts;
  std::vector<TokenKind> kinds;
  std::vector<std::string> bytes;  // what each token decodes to
  StringMap<int32_t> ids;

  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  std::string pre_tokenizer_name;  // for describe()
  AddedTokenMatcher added;
  std::unique_ptr<BpeModel> bpe;
  std::unique_ptr<SpmModel> spm;
  bool spm_dummy_prefix = false;     // SPM encode: a space before text that starts a sequence or follows a token
  bool strip_leading_space = false;  // decode: drop one space at the start of a sequence

  int32_t bos = -1;
  std::vector<int32_t> eos;
  bool add_bos = false;

  // Ids index dense tables, so an id is bounded before anything is allocated for it: by the number
  // of tokens the file declares (a vocabulary may have holes, but not more ids than entries) and by
  // 2^24 in any case. Loaders set it from their file before adding tokens.
  static constexpr int64_t kMaxIds = int64_t{1} << 24;
  int64_t id_limit = kMaxIds;
  void limit_ids(int64_t declared_tokens) { id_limit = std::min(declared_tokens, kMaxIds); }

  // Adds a token to the vocabulary at `id` (< id_limit), growing it as needed. Throws on a
  // conflicting id.
  void set_token(int64_t id, const std::string& text, TokenKind kind);
  // Fills `bytes` once kinds and texts are final: byte-level alphabet, ▁ -> space, <0xXX> bytes.
  void compute_decoded_bytes(bool byte_level, bool metaspace);
  int32_t find(std::string_view text) const;
};

}  // namespace kiln
