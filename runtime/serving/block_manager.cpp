#include "runtime/serving/block_manager.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"

namespace kiln {

BlockManager::BlockManager(int32_t num_pages, int32_t page_size, PageHashFn hash)
    : page_size_(page_size), hash_(std::move(hash)) {
  if (num_pages <= 0) fail("KV pool: num_pages = ", num_pages, ": expected > 0");
  if (page_size <= 0) fail("KV pool: page_size = ", page_size, ": expected > 0");
  if (!hash_) fail("KV pool: the page hash function is empty");
  pages_.resize(num_pages);
  page_tokens_.assign(static_cast<size_t>(num_pages) * page_size, -1);
  free_pages_.reserve(num_pages);
  for (int32_t p = num_pages - 1; p >= 0; --p) free_pages_.push_back(p);  // page 0 goes out first
}

int32_t BlockManager::find_cached(uint64_t key, uint64_t parent_key, uint64_t parent_serial,
                                  std::span<const int32_t> tokens) const {
  const auto [first, last] = cache_index_.equal_range(key);
  for (auto it = first; it != last; ++it) {
    const Page& page = pages_[it->second];
    if (page.parent_key == parent_key && page.parent_serial == parent_serial &&
        std::equal(tokens.begin(), tokens.end(), page_tokens(it->second).begin())) {
      return it->second;
    }
  }
  return -1;
}

std::vector<int32_t> BlockManager::match_prefix(std::span<const int32_t> tokens) const {
  std::vector<int32_t> hits;
  if (tokens.empty()) return hits;
  const size_t max_pages = (tokens.size() - 1) / page_size_;  // the last token is always computed
  uint64_t parent_key = kRootPageKey;
  uint64_t parent_serial = 0;
  for (size_t i = 0; i < max_pages; ++i) {
    const auto page_span = tokens.subspan(i * page_size_, page_size_);
    const uint64_t key = hash_(parent_key, page_span);
    const int32_t page = find_cached(key, parent_key, parent_serial, page_span);
    if (page < 0) break;
    hits.push_back(page);
    parent_key = key;
    parent_serial = pages_[page].serial;
  }
  return hits;
}

bool BlockManager::can_allocate(std::span<const int32_t> tokens, bool use_prefix_cache) const {
  if (tokens.empty()) return false;
  const std::vector<int32_t> hits = use_prefix_cache ? match_prefix(tokens) : std::vector<int32_t>();
  const auto idle_hits = std::count_if(hits.begin(), hits.end(),
                                       [&](int32_t p) { return pages_[p].ref_count == 0; });
  const int64_t fresh = pages_for(static_cast<int64_t>(tokens.size())) - static_cast<int64_t>(hits.size());
  return fresh + idle_hits <= num_available_pages();
}

int32_t BlockManager::allocate(RequestId seq, std::span<const int32_t> tokens, bool use_prefix_cache) {
  if (seqs_.count(seq)) fail("KV pool: sequence ", seq, " already holds pages");
  if (tokens.empty()) fail("KV pool: sequence ", seq, " has no tokens to allocate");
  if (!can_allocate(tokens, use_prefix_cache)) {
    fail("KV pool: sequence ", seq, " needs ", pages_for(static_cast<int64_t>(tokens.size())),
         " pages for ", tokens.size(), " tokens; only ", num_available_pages(), " of ", num_pages(),
         " are available");
  }
  SeqPages state;
  // Claim the hits before taking fresh pages, so an idle hit cannot be evicted for this sequence.
  for (int32_t page : use_prefix_cache ? match_prefix(tokens) : std::vector<int32_t>()) {
    Page& p = pages_[page];
    if (p.ref_count == 0) {
      lru_remove(page);
      ++pages_in_use_;
    }
    ++p.ref_count;
    state.pages.push_back(page);
    state.chain_key = p.key;
    state.chain_serial = p.serial;
  }
  state.num_chained = static_cast<int32_t>(state.pages.size());
  const int32_t cached_tokens = state.num_chained * page_size_;
  const int32_t total_pages = pages_for(static_cast<int64_t>(tokens.size()));
  while (static_cast<int32_t>(state.pages.size()) < total_pages) state.pages.push_back(take_fresh_page());
  state.num_slots = static_cast<int32_t>(tokens.size());
  seqs_.emplace(seq, std::move(state));
  prefix_query_tokens_ += static_cast<int64_t>(tokens.size());
  prefix_hit_tokens_ += cached_tokens;
  return cached_tokens;
}

bool BlockManager::can_append_slots(RequestId seq, int32_t num_new_tokens) const {
  const SeqPages& s = seq_pages(seq);
  const int32_t needed = pages_for(static_cast<int64_t>(s.num_slots) + num_new_tokens) -
                         static_cast<int32_t>(s.pages.size());
  return needed <= num_available_pages();
}

void BlockManager::append_slots(RequestId seq, int32_t num_new_tokens) {
  if (num_new_tokens < 0) fail("KV pool: sequence ", seq, " cannot append ", num_new_tokens, " slots");
  if (!can_append_slots(seq, num_new_tokens)) {
    fail("KV pool: sequence ", seq, " needs a new page for ", num_new_tokens,
         " more tokens and none is available");
  }
  SeqPages& s = seq_pages(seq);
  s.num_slots += num_new_tokens;
  while (static_cast<int32_t>(s.pages.size()) < pages_for(s.num_slots)) s.pages.push_back(take_fresh_page());
}

void BlockManager::mark_computed(RequestId seq, std::span<const int32_t> computed_tokens) {
  SeqPages& s = seq_pages(seq);
  if (static_cast<int64_t>(computed_tokens.size()) > s.num_slots) {
    fail("KV pool: sequence ", seq, " reports ", computed_tokens.size(), " computed tokens but holds only ",
         s.num_slots, " slots");
  }
  const int32_t full_pages = static_cast<int32_t>(computed_tokens.size()) / page_size_;
  for (; s.num_chained < full_pages; ++s.num_chained) {
    const auto tokens = computed_tokens.subspan(static_cast<size_t>(s.num_chained) * page_size_, page_size_);
    const uint64_t key = hash_(s.chain_key, tokens);
    const int32_t existing = find_cached(key, s.chain_key, s.chain_serial, tokens);
    if (existing >= 0) {
      // Another sequence computed the same page first: keep ours private, chain onto theirs.
      s.chain_serial = pages_[existing].serial;
    } else {
      const int32_t page = s.pages[s.num_chained];
      Page& p = pages_[page];
      p.cached = true;
      p.key = key;
      p.parent_key = s.chain_key;
      p.parent_serial = s.chain_serial;
      p.serial = next_serial_++;
      std::copy(tokens.begin(), tokens.end(),
                page_tokens_.begin() + static_cast<ptrdiff_t>(page) * page_size_);
      cache_index_.emplace(key, page);
      s.chain_serial = p.serial;
    }
    s.chain_key = key;
  }
}

void BlockManager::free(RequestId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) fail("KV pool: sequence ", seq, " holds no pages");
  // Release the last page first: it lands nearer the LRU head and is evicted before the pages in
  // front of it, which other sequences are likelier to share and without which it is unreachable.
  const std::vector<int32_t>& pages = it->second.pages;
  for (auto p = pages.rbegin(); p != pages.rend(); ++p) {
    Page& page = pages_[*p];
    if (--page.ref_count > 0) continue;
    --pages_in_use_;
    if (page.cached) {
      lru_push_back(*p);
    } else {
      free_pages_.push_back(*p);
    }
  }
  seqs_.erase(it);
}

std::span<const int32_t> BlockManager::block_table(RequestId seq) const { return seq_pages(seq).pages; }

int32_t BlockManager::num_slots(RequestId seq) const { return seq_pages(seq).num_slots; }

int32_t BlockManager::slot(RequestId seq, int32_t position) const {
  const SeqPages& s = seq_pages(seq);
  if (position < 0 || position >= s.num_slots) {
    fail("KV pool: position ", position, " of sequence ", seq, " is outside its ", s.num_slots, " slots");
  }
  return s.pages[position / page_size_] * page_size_ + position % page_size_;
}

BlockManagerStats BlockManager::stats() const {
  BlockManagerStats st;
  st.num_pages = num_pages();
  st.pages_in_use = pages_in_use_;
  st.pages_free = static_cast<int32_t>(free_pages_.size());
  st.pages_cached_idle = lru_size_;
  st.pages_cached = static_cast<int32_t>(cache_index_.size());
  st.prefix_query_tokens = prefix_query_tokens_;
  st.prefix_hit_tokens = prefix_hit_tokens_;
  st.evictions = evictions_;
  return st;
}

int32_t BlockManager::take_fresh_page() {
  int32_t page;
  if (!free_pages_.empty()) {
    page = free_pages_.back();
    free_pages_.pop_back();
  } else if (lru_head_ >= 0) {
    page = lru_head_;
    lru_remove(page);
    evict(page);
  } else {
    fail("KV pool: all ", num_pages(), " pages are in use");
  }
  pages_[page].ref_count = 1;
  ++pages_in_use_;
  return page;
}

void BlockManager::evict(int32_t page) {
  Page& p = pages_[page];
  const auto [first, last] = cache_index_.equal_range(p.key);
  for (auto it = first; it != last; ++it) {
    if (it->second == page) {
      cache_index_.erase(it);
      break;
    }
  }
  p.cached = false;
  p.serial = 0;
  ++evictions_;
}

void BlockManager::lru_push_back(int32_t page) {
  Page& p = pages_[page];
  p.lru_prev = lru_tail_;
  p.lru_next = -1;
  if (lru_tail_ >= 0) {
    pages_[lru_tail_].lru_next = page;
  } else {
    lru_head_ = page;
  }
  lru_tail_ = page;
  ++lru_size_;
}

void BlockManager::lru_remove(int32_t page) {
  Page& p = pages_[page];
  if (p.lru_prev >= 0) {
    pages_[p.lru_prev].lru_next = p.lru_next;
  } else {
    lru_head_ = p.lru_next;
  }
  if (p.lru_next >= 0) {
    pages_[p.lru_next].lru_prev = p.lru_prev;
  } else {
    lru_tail_ = p.lru_prev;
  }
  p.lru_prev = p.lru_next = -1;
  --lru_size_;
}

const BlockManager::SeqPages& BlockManager::seq_pages(RequestId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) fail("KV pool: sequence ", seq, " holds no pages");
  return it->second;
}

BlockManager::SeqPages& BlockManager::seq_pages(RequestId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) fail("KV pool: sequence ", seq, " holds no pages");
  return it->second;
}

}  // namespace kiln
