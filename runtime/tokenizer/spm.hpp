// SentencePiece BPE (Llama 2 family, GGUF `tokenizer.ggml.model` = "llama"): pieces are merged by
// token score rather than merge rank, as llama.cpp's llm_tokenizer_spm does. The input is already
// escaped ("▁" for spaces, dummy prefix added by the caller). Characters that end up in no token
// are spelled with <0xXX> byte tokens, or the unknown token when the vocabulary has none.
//
// When no token has "▁" after another character (true of Llama 2's vocabulary), no merge can
// cross the start of a word, so each word is merged on its own (same result, and a per-word cache
// applies); otherwise the whole text is merged at once, as llama.cpp does.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/string_map.hpp"

namespace kiln {

class SpmModel {
 public:
  // `pieces` maps the text of every token that merging may produce (normal and user-defined
  // tokens) to its id; `scores` is indexed by id.
  SpmModel(StringMap<int32_t> pieces, std::vector<float> scores, const std::array<int32_t, 256>& byte_ids,
           int32_t unk_id);

  void encode(std::string_view escaped, std::vector<int32_t>& out) const;
  void set_cache_enabled(bool enabled) { cache_enabled_.store(enabled); }

 private:
  void encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const;

  StringMap<int32_t> pieces_;
  bool split_words_ = false;
  static constexpr size_t kMaxCachedWord = 64;
  static constexpr size_t kMaxCacheEntries = 1 << 18;
  mutable std::mutex cache_mutex_;
  mutable StringMap<std::vector<int32_t>> cache_;
  std::atomic<bool> cache_enabled_{true};
  std::vector<float> scores_;
  std::array<int32_t, 256> byte_ids_;
  int32_t unk_id_;
};

}  // namespace kiln
