// Paged KV block manager: one pool of fixed-size pages, per-sequence block tables, reference counts
// and a prefix cache of full pages (vLLM v1's KVCacheManager + BlockPool, nano-vllm's BlockManager).
//
// Prefix cache. A page joins the cache once it is full AND its KV has been computed (mark_computed,
// called after the forward step): a lookup can never return a page whose KV is still being written
// in the same step. Entries are found by chain key (page_hash.hpp) and confirmed by comparing the
// page's tokens, its parent key and its parent's identity — the registration serial of the cached
// page before it. The serial matters after eviction: a child entry whose parent page was evicted
// and reused for other tokens can no longer be reached, even if the new tokens collide on the key.
//
// Page life cycle. free (uncached, refcount 0) -> in use (refcount > 0, maybe cached) -> on release
// either back to free, or, when cached, onto an LRU list of idle cached pages. A fresh page comes
// from the free pages first; only when none is left is the least recently released idle cached page
// evicted. A hit on an idle cached page takes it off the LRU list.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/serving/page_hash.hpp"
#include "runtime/serving/request_id.hpp"

namespace kiln {

struct BlockManagerStats {
  int32_t num_pages = 0;
  int32_t pages_in_use = 0;         // refcount > 0
  int32_t pages_free = 0;           // uncached, refcount 0
  int32_t pages_cached_idle = 0;    // cached, refcount 0 (on the LRU list, evictable)
  int32_t pages_cached = 0;         // cached in total (idle or in use)
  int64_t prefix_query_tokens = 0;  // tokens of every allocate()d sequence
  int64_t prefix_hit_tokens = 0;    // of which served from the prefix cache
  int64_t evictions = 0;            // idle cached pages reused for other tokens
};

class BlockManager {
 public:
  BlockManager(int32_t num_pages, int32_t page_size, PageHashFn hash = default_page_hash);

  int32_t num_pages() const { return static_cast<int32_t>(pages_.size()); }
  int32_t page_size() const { return page_size_; }
  int32_t pages_for(int64_t num_tokens) const {
    return static_cast<int32_t>((num_tokens + page_size_ - 1) / page_size_);
  }
  // Pages a new allocation could take now: free plus idle cached.
  int32_t num_available_pages() const { return static_cast<int32_t>(free_pages_.size()) + lru_size_; }

  // Whether allocate(tokens) would succeed now.
  bool can_allocate(std::span<const int32_t> tokens, bool use_prefix_cache = true) const;
  // Slots for all of a new sequence's known tokens (prompt, or prompt + generated after a
  // preemption). Leading full pages come from the prefix cache where possible — at most
  // (len - 1) / page_size pages, so the last token is always computed. Returns how many leading
  // tokens are cached (a multiple of page_size). Throws when the pool cannot hold the sequence.
  // use_prefix_cache false takes no hits: every token is computed (and cached as usual after).
  int32_t allocate(RequestId seq, std::span<const int32_t> tokens, bool use_prefix_cache = true);

  // Whether the sequence can grow by num_new_tokens slots now.
  bool can_append_slots(RequestId seq, int32_t num_new_tokens) const;
  // Grows the sequence's slots, taking a fresh page whenever the last one fills.
  void append_slots(RequestId seq, int32_t num_new_tokens);

  // After a step: the sequence's first computed_tokens.size() tokens have KV in their slots.
  // Registers each newly full page in the prefix cache (or, when an identical page is already
  // cached, chains onto that one). Prompt and generated tokens alike.
  void mark_computed(RequestId seq, std::span<const int32_t> computed_tokens);

  // Releases the sequence's pages; cached ones stay cached (idle), the rest become free.
  void free(RequestId seq);

  bool has_sequence(RequestId seq) const { return seqs_.count(seq) != 0; }
  std::span<const int32_t> block_table(RequestId seq) const;
  int32_t num_slots(RequestId seq) const;
  // KV slot of a position: page * page_size + offset in the page.
  int32_t slot(RequestId seq, int32_t position) const;

  BlockManagerStats stats() const;
  int32_t ref_count(int32_t page) const { return pages_.at(page).ref_count; }
  bool is_cached(int32_t page) const { return pages_.at(page).cached; }

 private:
  struct Page {
    int32_t ref_count = 0;
    bool cached = false;
    uint64_t key = 0;            // chain key (valid when cached)
    uint64_t parent_key = 0;
    uint64_t serial = 0;         // unique per registration; 0 = none
    uint64_t parent_serial = 0;  // serial of the cached page before it; 0 for a first page
    int32_t lru_prev = -1;       // LRU links (idle cached pages only)
    int32_t lru_next = -1;
  };
  struct SeqPages {
    std::vector<int32_t> pages;
    int32_t num_slots = 0;
    int32_t num_chained = 0;        // leading full pages registered in (or matched to) the cache
    uint64_t chain_key = kRootPageKey;
    uint64_t chain_serial = 0;      // identity of the cached page that stands for page num_chained-1
  };

  std::span<const int32_t> page_tokens(int32_t page) const {
    return {page_tokens_.data() + static_cast<size_t>(page) * page_size_, static_cast<size_t>(page_size_)};
  }
  // Cached page holding these tokens after the given parent, or -1.
  int32_t find_cached(uint64_t key, uint64_t parent_key, uint64_t parent_serial,
                      std::span<const int32_t> tokens) const;
  // Longest chain of cached pages matching the tokens' leading full pages (capped at len - 1).
  std::vector<int32_t> match_prefix(std::span<const int32_t> tokens) const;
  int32_t take_fresh_page();
  void evict(int32_t page);
  void lru_push_back(int32_t page);
  void lru_remove(int32_t page);
  const SeqPages& seq_pages(RequestId seq) const;
  SeqPages& seq_pages(RequestId seq);

  int32_t page_size_;
  PageHashFn hash_;
  std::vector<Page> pages_;
  std::vector<int32_t> page_tokens_;  // [num_pages * page_size]: tokens of cached pages
  std::vector<int32_t> free_pages_;   // stack; the next page handed out is at the back
  int32_t lru_head_ = -1;             // least recently released idle cached page
  int32_t lru_tail_ = -1;
  int32_t lru_size_ = 0;
  int32_t pages_in_use_ = 0;
  std::unordered_multimap<uint64_t, int32_t> cache_index_;  // chain key -> cached page
  std::unordered_map<RequestId, SeqPages> seqs_;
  uint64_t next_serial_ = 1;
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace kiln
