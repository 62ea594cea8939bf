#include "runtime/tokenizer/spm.hpp"

#include <queue>

#include "runtime/tokenizer/sentencepiece_text.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace kiln {

SpmModel::SpmModel(StringMap<int32_t> pieces, std::vector<float> scores, const std::array<int32_t, 256>& byte_ids,
                   int32_t unk_id)
    : pieces_(std::move(pieces)), scores_(std::move(scores)), byte_ids_(byte_ids), unk_id_(unk_id) {
  split_words_ = true;
  for (const auto& [text, id] : pieces_) {
    size_t after_run = 0;  // end of the leading run of "▁"
    while (text.compare(after_run, kMetaspace.size(), kMetaspace) == 0) after_run += kMetaspace.size();
    if (text.find(kMetaspace, after_run) != std::string::npos) {
      split_words_ = false;
      break;
    }
  }
}

void SpmModel::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (!split_words_) {
    encode_chunk(text, out);
    return;
  }
  // A word starts at each "▁" that follows another character.
  size_t start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t hit = text.find(kMetaspace, pos);
    if (hit == std::string_view::npos) break;
    const bool after_space =
        hit >= kMetaspace.size() && text.substr(hit - kMetaspace.size(), kMetaspace.size()) == kMetaspace;
    if (hit > start && !after_space) {
      encode_chunk(text.substr(start, hit - start), out);
      start = hit;
    }
    pos = hit + kMetaspace.size();
  }
  encode_chunk(text.substr(start), out);
}

void SpmModel::encode_chunk(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  const bool use_cache =
      split_words_ && text.size() <= kMaxCachedWord && cache_enabled_.load(std::memory_order_relaxed);
  if (use_cache) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (const auto it = cache_.find(text); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first_output = out.size();
  // Symbols are contiguous byte ranges of `text`, linked in order; merged-away symbols get n = 0.
  struct Symbol {
    uint32_t offset, n;
    int prev, next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = utf8::char_end(text, pos);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(end - pos), index - 1,
                       end == text.size() ? -1 : index + 1});
    pos = end;
  }

  struct Bigram {
    int left, right;
    float score;
    uint32_t size;
  };
  // Highest score first; on equal score the leftmost pair.
  const auto lower = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower)> queue(lower);
  const auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const uint32_t size = symbols[left].n + symbols[right].n;
    const auto it = pieces_.find(text.substr(symbols[left].offset, size));
    if (it == pieces_.end()) return;
    queue.push({left, right, scores_[it->second], size});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Skip pairs where either side has changed since the pair was queued.
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  for (int i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].offset, symbols[i].n);
    if (const auto it = pieces_.find(piece); it != pieces_.end()) {
      out.push_back(it->second);
      continue;
    }
    // Only single characters can be missing (merges only form known pieces): spell the bytes.
    for (const char c : piece) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      if (id >= 0) {
        out.push_back(id);
      } else if (unk_id_ >= 0) {
        out.push_back(unk_id_);
        break;  // one unknown token for the whole character
      }
    }
  }
  if (use_cache) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kMaxCacheEntries) {
      cache_.emplace(std::string(text), std::vector<int32_t>(out.begin() + first_output, out.end()));
    }
  }
}

}  // namespace kiln
