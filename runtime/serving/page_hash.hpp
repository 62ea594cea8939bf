// The prefix cache's page key: a chain hash, key(page i) = hash(key(page i-1), tokens of page i), so
// a page's key stands for every token before it too. Injectable so tests can force collisions;
// the block manager confirms every hit against the stored tokens, so a collision costs a miss,
// never a wrong page.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

namespace kiln {

using PageHashFn = std::function<uint64_t(uint64_t parent_key, std::span<const int32_t> page_tokens)>;

// Parent key of a sequence's first page.
constexpr uint64_t kRootPageKey = 0;

// splitmix64's finalizer folded over the tokens, seeded by the parent key.
uint64_t default_page_hash(uint64_t parent_key, std::span<const int32_t> page_tokens);

}  // namespace kiln
