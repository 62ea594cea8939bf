#include "runtime/tokenizer/bpe.hpp"

#include <climits>
#include <queue>

#include "runtime/core/error.hpp"
#include "runtime/tokenizer/byte_level.hpp"
#include "runtime/tokenizer/sentencepiece_text.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace kiln {

void BpeModel::MergeTable::reserve(size_t count) {
  size_t capacity = 16;
  while (capacity < count * 2) capacity *= 2;  // load factor <= 1/2
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  size_ = 0;
}

bool BpeModel::MergeTable::insert(int32_t left, int32_t right, Merge merge) {
  const uint64_t k = key(left, right);
  for (uint64_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
    if (slots_[i].key == k) return false;
    if (slots_[i].key == kEmpty) {
      slots_[i] = {k, merge};
      ++size_;
      return true;
    }
  }
}

const BpeModel::Merge* BpeModel::MergeTable::find(int32_t left, int32_t right) const {
  const uint64_t k = key(left, right);
  for (uint64_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
    if (slots_[i].key == k) return &slots_[i].merge;
    if (slots_[i].key == kEmpty) return nullptr;
  }
}

BpeModel::BpeModel(const StringMap<int32_t>& vocab,
                   const std::vector<std::pair<std::string_view, std::string_view>>& merges, const Options& options,
                   const std::string& origin)
    : options_(options) {
  const auto lookup = [&](std::string_view text) {
    const auto it = vocab.find(text);
    return it == vocab.end() ? -1 : it->second;
  };
  merges_.reserve(merges.size());
  std::string merged;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    merged.assign(left).append(right);
    const int32_t left_id = lookup(left), right_id = lookup(right), merged_id = lookup(merged);
    if (left_id < 0 || right_id < 0 || merged_id < 0) {
      const std::string_view missing = left_id < 0 ? left : right_id < 0 ? right : std::string_view(merged);
      fail(origin, ": merge ", rank, " (\"", left, "\" \"", right, "\") names \"", missing,
           "\", which is not in the vocabulary");
    }
    // A repeated pair keeps its first rank, as in llama.cpp (HF keeps the last); the vocabularies
    // we load have no repeats.
    merges_.insert(left_id, right_id, Merge{static_cast<int32_t>(rank), merged_id});
  }

  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = options.byte_level ? lookup(byte_level::byte_to_text(static_cast<uint8_t>(b))) : -1;
  }
  if (options.byte_fallback) {
    fallback_ids_ = byte_token_ids(vocab);
  } else {
    fallback_ids_.fill(-1);
  }
  if (options.byte_level) {
    // Pieces arrive as raw bytes, so index whole tokens by the bytes they stand for.
    if (options.ignore_merges) {
      whole_.reserve(vocab.size());
      for (const auto& [text, id] : vocab) {
        if (auto bytes = byte_level::text_to_bytes(text)) whole_.emplace(std::move(*bytes), id);
      }
    }
  } else {
    whole_ = vocab;
  }
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const {
  ids.clear();
  if (options_.byte_level) {
    // Bytes whose character is missing from the vocabulary are dropped, as HF does without an
    // unknown token (a byte-level vocabulary normally holds all 256).
    for (const char c : piece) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      if (id >= 0) ids.push_back(id);
    }
    return;
  }
  // Character by character, as HF's BPE::merge_word.
  int32_t pending_unk = -1;
  for (size_t pos = 0; pos < piece.size();) {
    const size_t end = utf8::char_end(piece, pos);
    const std::string_view ch = piece.substr(pos, end - pos);
    pos = end;
    if (const auto it = whole_.find(ch); it != whole_.end()) {
      if (pending_unk >= 0) ids.push_back(pending_unk);
      pending_unk = -1;
      ids.push_back(it->second);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (const char c : ch) all = all && fallback_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (const char c : ch) ids.push_back(fallback_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (options_.unk_id >= 0) {
      if (pending_unk >= 0 && !options_.fuse_unk) ids.push_back(pending_unk);
      pending_unk = options_.unk_id;
    }
  }
  if (pending_unk >= 0) ids.push_back(pending_unk);
}

// Repeatedly merges the adjacent pair of lowest rank, the leftmost one on ties. (HF and llama.cpp
// run this with a priority queue and lazily skipped stale entries; a stale entry can never match a
// current pair, because a pair's merged token is longer than any stale pair's, so both orders are
// the same.)
void BpeModel::merge(std::vector<int32_t>& ids) const {
  if (ids.size() < 2) return;
  if (ids.size() <= 48) {
    merge_short(ids);
  } else {
    merge_long(ids);
  }
}

// Pieces are mostly a few symbols long: scanning an array of pair ranks beats a heap there.
void BpeModel::merge_short(std::vector<int32_t>& ids) const {
  constexpr int32_t kNone = INT32_MAX;
  int32_t ranks[48], merged[48];
  size_t n = ids.size();
  const auto update = [&](size_t i) {
    const Merge* m = merges_.find(ids[i], ids[i + 1]);
    ranks[i] = m ? m->rank : kNone;
    merged[i] = m ? m->id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) update(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == kNone) break;
    ids[best] = merged[best];
    // Close the gap left by the right symbol.
    for (size_t i = best + 1; i + 1 < n; ++i) ids[i] = ids[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) {
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) update(best - 1);
    if (best + 1 < n) update(best);
    else ranks[best] = kNone;
  }
  ids.resize(n);
}

void BpeModel::merge_long(std::vector<int32_t>& ids) const {
  const int n = static_cast<int>(ids.size());
  struct Symbol {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols(n);
  for (int i = 0; i < n; ++i) symbols[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};

  struct Candidate {
    int32_t rank;
    int pos;
    int32_t id;
  };
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  const auto consider = [&](int left) {
    const int right = symbols[left].next;
    if (right < 0) return;
    if (const Merge* m = merges_.find(symbols[left].id, symbols[right].id)) queue.push({m->rank, left, m->id});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const Merge* m = merges_.find(left.id, right.id);
    if (!m || m->id != top.id) continue;  // stale: the pair here changed since it was queued
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  ids.clear();
  for (int i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {
    if (const auto it = whole_.find(piece); it != whole_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool use_cache = cache_enabled_.load(std::memory_order_relaxed) && piece.size() <= kMaxCachedPiece;
  if (use_cache) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (const auto it = cache_.find(piece); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  thread_local std::vector<int32_t> ids;
  initial_symbols(piece, ids);
  merge(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (use_cache) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kMaxCacheEntries) cache_.emplace(std::string(piece), ids);
  }
}

}  // namespace kiln
