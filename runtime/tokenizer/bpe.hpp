// BPE with merge ranks (HF tokenizers' BPE model; llama.cpp's "gpt2" vocabularies).
//
// Byte-level vocabularies (GPT-2, Llama 3, Qwen, DeepSeek, SmolLM) work on raw bytes: each byte
// starts as the token of its byte-level character and merges are applied lowest rank first,
// leftmost first on ties. Other vocabularies start from UTF-8 characters, with <0xXX> byte
// tokens (byte_fallback) or the unknown token for characters missing from the vocabulary.
// Results for short pieces are cached; the cache is shared by threads behind a mutex.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/tokenizer/string_map.hpp"

namespace kiln {

class BpeModel {
 public:
  struct Options {
    bool byte_level = true;
    bool ignore_merges = false;  // a piece that is itself a token is emitted whole (Llama 3)
    bool byte_fallback = false;  // unknown characters become <0xXX> tokens
    int32_t unk_id = -1;         // unknown characters become this token (if >= 0)
    bool fuse_unk = false;       // consecutive unknown characters become one unknown token
  };

  // `vocab` maps token text to id for the model's tokens. Merges are pairs of token texts (views
  // into the caller's data, needed only while constructing); the merged text must be a token
  // too. Throws naming `origin` and the merge's index otherwise.
  BpeModel(const StringMap<int32_t>& vocab, const std::vector<std::pair<std::string_view, std::string_view>>& merges,
           const Options& options, const std::string& origin);
  BpeModel(BpeModel&&) = delete;

  // Appends the tokens of one pre-tokenized piece (raw bytes for byte-level models).
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  void set_cache_enabled(bool enabled) { cache_enabled_.store(enabled); }
  size_t merge_count() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  // Open-addressing table of (left id, right id) -> merge: lookups dominate encoding, and
  // std::unordered_map's node chasing costs twice as much.
  class MergeTable {
   public:
    void reserve(size_t count);
    bool insert(int32_t left, int32_t right, Merge merge);  // false when the pair is present
    const Merge* find(int32_t left, int32_t right) const;
    size_t size() const { return size_; }

   private:
    struct Slot {
      uint64_t key = kEmpty;
      Merge merge{};
    };
    static constexpr uint64_t kEmpty = ~0ULL;
    static uint64_t key(int32_t left, int32_t right) {
      return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    }
    static uint64_t mix(uint64_t k) {
      k ^= k >> 33;
      k *= 0xff51afd7ed558ccdULL;
      k ^= k >> 33;
      return k;
    }
    std::vector<Slot> slots_;
    uint64_t mask_ = 0;
    size_t size_ = 0;
  };

  void initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const;
  void merge(std::vector<int32_t>& ids) const;
  void merge_short(std::vector<int32_t>& ids) const;
  void merge_long(std::vector<int32_t>& ids) const;

  Options options_;
  MergeTable merges_;
  StringMap<int32_t> whole_;         // ignore_merges and character lookup: piece -> id
  std::array<int32_t, 256> byte_ids_;      // byte-level: id of each byte's character (-1: missing)
  std::array<int32_t, 256> fallback_ids_;  // byte_fallback: id of <0xXX> (-1: missing)

  static constexpr size_t kMaxCachedPiece = 64;
  static constexpr size_t kMaxCacheEntries = 1 << 18;
  mutable std::mutex cache_mutex_;
  mutable StringMap<std::vector<int32_t>> cache_;
  std::atomic<bool> cache_enabled_{true};
};

}  // namespace kiln
