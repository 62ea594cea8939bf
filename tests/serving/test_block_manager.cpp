#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/serving/block_manager.hpp"

using namespace kiln;

namespace {

std::vector<int32_t> iota_tokens(int32_t n, int32_t first) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<int32_t> table(const BlockManager& m, RequestId seq) {
  const auto span = m.block_table(seq);
  return {span.begin(), span.end()};
}

// Every page hashes alike: only the token comparison tells pages apart.
uint64_t colliding_hash(uint64_t, std::span<const int32_t>) { return 42; }

}  // namespace

TEST_CASE("allocate append and free track pages and reference counts") {
  BlockManager m(8, 4);
  const auto tokens = iota_tokens(10, 100);
  REQUIRE(m.can_allocate(tokens));
  CHECK(m.allocate(1, tokens) == 0);
  CHECK(table(m, 1) == std::vector<int32_t>{0, 1, 2});
  CHECK(m.num_slots(1) == 10);
  CHECK(m.slot(1, 0) == 0);
  CHECK(m.slot(1, 5) == 5);
  CHECK(m.slot(1, 9) == 9);
  CHECK_THROWS_AS(m.slot(1, 10), Error);
  for (int32_t p : {0, 1, 2}) CHECK(m.ref_count(p) == 1);
  BlockManagerStats st = m.stats();
  CHECK(st.pages_in_use == 3);
  CHECK(st.pages_free == 5);

  // Growing inside the last page takes no page; crossing into a new one takes page 3.
  m.append_slots(1, 2);
  CHECK(table(m, 1).size() == 3);
  m.append_slots(1, 1);
  CHECK(table(m, 1) == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(m.slot(1, 12) == 12);

  CHECK(m.allocate(2, iota_tokens(3, 500)) == 0);
  CHECK(table(m, 2) == std::vector<int32_t>{4});
  CHECK(m.slot(2, 2) == 4 * 4 + 2);

  m.free(1);
  st = m.stats();
  CHECK(st.pages_in_use == 1);
  CHECK(st.pages_free == 7);
  CHECK(st.pages_cached == 0);  // nothing was marked computed: nothing is cached
  for (int32_t p : {0, 1, 2, 3}) CHECK(m.ref_count(p) == 0);
  CHECK_FALSE(m.has_sequence(1));
  CHECK_THROWS_WITH(m.free(1), Catch::Contains("sequence 1 holds no pages"));
  CHECK_THROWS_WITH(m.allocate(2, iota_tokens(3, 0)), Catch::Contains("already holds pages"));
}

TEST_CASE("two sequences sharing a prefix share its computed full pages") {
  BlockManager m(16, 4);
  const auto first = iota_tokens(11, 0);  // pages [0..3] [4..7] [8..10]
  CHECK(m.allocate(1, first) == 0);
  m.mark_computed(1, first);
  CHECK(m.is_cached(0));
  CHECK(m.is_cached(1));
  CHECK_FALSE(m.is_cached(2));  // partial page

  std::vector<int32_t> second = iota_tokens(8, 0);
  second.insert(second.end(), {90, 91, 92, 93});
  CHECK(m.allocate(2, second) == 8);
  CHECK(table(m, 2) == std::vector<int32_t>{0, 1, 3});
  CHECK(m.ref_count(0) == 2);
  CHECK(m.ref_count(1) == 2);

  // The last token is never served from the cache: 8 identical tokens hit only the first page.
  CHECK(m.allocate(3, iota_tokens(8, 0)) == 4);
  CHECK(table(m, 3) == std::vector<int32_t>{0, 4});
  // Same second page but a different first page: the chain breaks at page 0.
  std::vector<int32_t> other_start = iota_tokens(12, 0);
  other_start[1] = 77;
  CHECK(m.allocate(4, other_start) == 0);

  const BlockManagerStats st = m.stats();
  CHECK(st.prefix_query_tokens == 11 + 12 + 8 + 12);
  CHECK(st.prefix_hit_tokens == 8 + 4);

  // Freeing the owner keeps the shared pages alive for the others.
  m.free(1);
  CHECK(m.ref_count(0) == 2);
  CHECK(m.ref_count(1) == 1);
}

TEST_CASE("generated tokens fill and register pages too") {
  BlockManager m(8, 4);
  std::vector<int32_t> tokens = iota_tokens(3, 10);
  m.allocate(1, tokens);
  m.mark_computed(1, tokens);
  CHECK(m.stats().pages_cached == 0);
  tokens.push_back(13);  // a generated token, fed by the next decode
  m.append_slots(1, 1);
  m.mark_computed(1, tokens);
  CHECK(m.stats().pages_cached == 1);
  tokens.push_back(14);
  m.append_slots(1, 1);
  CHECK(table(m, 1) == std::vector<int32_t>{0, 1});

  std::vector<int32_t> again = iota_tokens(4, 10);
  again.push_back(99);
  CHECK(m.allocate(2, again) == 4);
  CHECK(table(m, 2).front() == 0);
}

TEST_CASE("a forced hash collision never serves a page with different tokens") {
  BlockManager m(16, 4, colliding_hash);
  const auto a = iota_tokens(9, 0);
  m.allocate(1, a);
  m.mark_computed(1, a);
  CHECK(m.stats().pages_cached == 2);  // both pages cached under the same key

  std::vector<int32_t> b = iota_tokens(9, 0);
  b[2] = 1000;  // differs inside page 0
  CHECK(m.allocate(2, b) == 0);
  CHECK(table(m, 2) == std::vector<int32_t>{3, 4, 5});

  std::vector<int32_t> c = iota_tokens(9, 0);
  c[6] = 1000;  // same page 0, differs inside page 1
  CHECK(m.allocate(3, c) == 4);
  CHECK(table(m, 3).front() == 0);

  // Page 1's tokens again, but behind a different page 0: the parent check refuses it.
  std::vector<int32_t> d = iota_tokens(9, 0);
  d[0] = 500;
  CHECK(m.allocate(4, d) == 0);

  CHECK(m.allocate(5, a) == 8);  // the true prefix still hits through the collisions
  CHECK(table(m, 5).front() == 0);
  CHECK(table(m, 5)[1] == 1);
}

TEST_CASE("a cached child whose parent was evicted is not served behind a colliding new parent") {
  BlockManager m(8, 4, colliding_hash);
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {5, 6, 7, 8}, a2 = {9, 9, 9, 9};
  auto concat = [](std::vector<int32_t> x, const std::vector<int32_t>& y, int32_t tail) {
    x.insert(x.end(), y.begin(), y.end());
    x.push_back(tail);
    return x;
  };
  std::vector<int32_t> x = a;
  x.push_back(99);
  m.allocate(1, x);                      // pages 0 1
  m.allocate(2, concat(a, b, 98));       // pages 2 3 4, computed privately alongside 1
  m.mark_computed(1, a);                 // page 0 caches a
  m.free(1);                             // LRU: 0
  m.mark_computed(2, concat(a, b, 98));  // page 2 duplicates page 0; page 3 caches b behind page 0
  CHECK_FALSE(m.is_cached(2));
  CHECK(m.is_cached(3));
  m.free(2);  // LRU: 0 3

  // Seven fresh pages: the six free ones, then the oldest idle page, 0. Page 3 (b) survives.
  m.allocate(3, iota_tokens(25, 1000));
  CHECK_FALSE(m.is_cached(0));
  CHECK(m.is_cached(3));
  m.free(3);

  // a2 collides with a's key and takes a page of its own in the cache; b's entry still names a's
  // serial as its parent, so a2 + b must not reach it.
  std::vector<int32_t> y = a2;
  y.push_back(97);
  m.allocate(4, y);
  m.mark_computed(4, a2);
  CHECK(m.allocate(5, concat(a2, b, 96)) == 4);
}

TEST_CASE("identical pages computed twice are cached once and chains continue through the first") {
  BlockManager m(16, 4);
  const auto prompt = iota_tokens(9, 0);
  m.allocate(1, prompt);
  m.allocate(2, prompt);  // admitted before 1 computed anything: no hit
  CHECK(table(m, 2) == std::vector<int32_t>{3, 4, 5});
  m.mark_computed(1, std::span<const int32_t>(prompt).first(4));  // 1 registers page 0
  m.mark_computed(2, prompt);                                       // 2 finds it, registers page 4
  CHECK(m.is_cached(0));
  CHECK_FALSE(m.is_cached(3));
  CHECK(m.is_cached(4));
  m.mark_computed(1, prompt);  // page 1 duplicates page 4: stays private
  CHECK_FALSE(m.is_cached(1));
  CHECK(m.stats().pages_cached == 2);

  CHECK(m.allocate(3, prompt) == 8);
  CHECK(table(m, 3) == std::vector<int32_t>{0, 4, 6});
}

TEST_CASE("idle cached pages are evicted least recently released first and tail page first") {
  BlockManager m(6, 4);
  const auto a = iota_tokens(9, 0);    // pages 0 1 (full) 2 (partial)
  const auto b = iota_tokens(9, 100);  // pages 3 4 (full) 5 (partial)
  m.allocate(1, a);
  m.allocate(2, b);
  m.mark_computed(1, a);
  m.mark_computed(2, b);
  m.free(1);  // LRU: 1 0
  m.free(2);  // LRU: 1 0 4 3; free: 2 5
  BlockManagerStats st = m.stats();
  CHECK(st.pages_cached_idle == 4);
  CHECK(st.pages_free == 2);
  CHECK(m.num_available_pages() == 6);

  // 13 fresh tokens need 4 pages: the two free ones, then the oldest idle: 1, then 0.
  CHECK(m.allocate(3, iota_tokens(13, 1000)) == 0);
  CHECK(table(m, 3) == std::vector<int32_t>{5, 2, 1, 0});
  CHECK_FALSE(m.is_cached(1));
  CHECK_FALSE(m.is_cached(0));
  CHECK(m.is_cached(4));
  CHECK(m.stats().evictions == 2);
  m.free(3);

  // a's prefix is gone; b's survives, and a hit takes its pages off the LRU list.
  CHECK(m.allocate(4, a) == 0);
  m.free(4);
  CHECK(m.allocate(5, b) == 8);
  CHECK(table(m, 5)[0] == 3);
  CHECK(table(m, 5)[1] == 4);
  CHECK(m.ref_count(3) == 1);
  CHECK(m.stats().pages_cached_idle == 0);
}

TEST_CASE("an exhausted pool refuses allocations and growth") {
  BlockManager m(4, 4);
  m.allocate(1, iota_tokens(12, 0));  // 3 pages
  CHECK(m.can_allocate(iota_tokens(4, 50)));
  CHECK_FALSE(m.can_allocate(iota_tokens(5, 50)));
  CHECK_THROWS_WITH(m.allocate(2, iota_tokens(5, 50)), Catch::Contains("needs 2 pages for 5 tokens; only 1 of 4"));
  CHECK_FALSE(m.has_sequence(2));
  m.allocate(2, iota_tokens(4, 50));
  CHECK(m.num_available_pages() == 0);
  CHECK(m.can_append_slots(1, 0));
  CHECK_FALSE(m.can_append_slots(1, 1));
  CHECK_THROWS_WITH(m.append_slots(1, 1), Catch::Contains("none is available"));
  m.free(2);
  CHECK(m.can_append_slots(1, 4));
  CHECK_FALSE(m.can_append_slots(1, 5));
}

TEST_CASE("block manager arguments are checked") {
  CHECK_THROWS_WITH(BlockManager(0, 16), Catch::Contains("num_pages = 0"));
  CHECK_THROWS_WITH(BlockManager(8, 0), Catch::Contains("page_size = 0"));
  BlockManager m(4, 4);
  m.allocate(1, iota_tokens(3, 0));
  CHECK_THROWS_WITH(m.mark_computed(1, iota_tokens(4, 0)), Catch::Contains("only 3 slots"));
  CHECK_THROWS_AS(m.allocate(2, std::vector<int32_t>{}), Error);
}
