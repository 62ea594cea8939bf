// The fast CPU backend's attention (runtime/cpu/attention.hpp) over bf16 KV pages against the
// reference's over fp32 pages that hold the same values, and kv_write into bf16 pages: prefill
// chunks with keys already cached and a decode token in one step, shuffled pages, page sizes that
// do not divide the contexts, GQA, and head dims with and without a part past the last 16.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/core/dtype.hpp"
#include "runtime/cpu/attention.hpp"
#include "runtime/ref/ops.hpp"

using namespace kiln;

namespace {

struct Sequence {
  int32_t cached;  // keys in the cache before this step
  int32_t new_tokens;
};

void check_attention(int heads, int kv_heads, int head_dim, int page_size) {
  const int row = (heads + 2 * kv_heads) * head_dim;
  const shape::attention s{.heads = heads, .kv_heads = kv_heads, .head_dim = head_dim, .page_size = page_size,
                           .row = row, .scale = 1.0f / std::sqrt(static_cast<float>(head_dim)), .partition = 512,
                           .max_partitions = 1};
  const shape::kv_write w{.kv_heads = kv_heads, .head_dim = head_dim, .page_size = page_size, .row = row,
                          .k_offset = heads * head_dim, .v_offset = (heads + kv_heads) * head_dim};
  const KvLayout layout{kv_heads, head_dim, page_size};
  // A prompt's first chunk, a decode token, and a later chunk over cached keys.
  const std::vector<Sequence> seqs = {{0, 37}, {60, 1}, {20, 5}};
  int32_t max_context = 0;
  for (const Sequence& q : seqs) max_context = std::max(max_context, q.cached + q.new_tokens);
  const int32_t pages_per_seq = (max_context + page_size - 1) / page_size;
  const int32_t num_pages = pages_per_seq * static_cast<int32_t>(seqs.size());
  std::mt19937 rng(heads * 1000 + head_dim * 10 + page_size);
  std::vector<int32_t> page_ids(num_pages);
  std::iota(page_ids.begin(), page_ids.end(), 0);
  std::shuffle(page_ids.begin(), page_ids.end(), rng);

  // Every key of every sequence, cached or new, written by kv_write from qkv rows; the rows are
  // rounded to bf16 first, so that the fp32 pages hold exactly what the bf16 pages do.
  std::vector<int32_t> slots, positions, query_start{0}, context_len, block_tables(page_ids.begin(), page_ids.end());
  std::vector<int32_t> step_slots, step_positions;
  for (size_t q = 0; q < seqs.size(); ++q) {
    for (int32_t p = 0; p < seqs[q].cached + seqs[q].new_tokens; ++p) {
      const int32_t slot = block_tables[q * pages_per_seq + p / page_size] * page_size + p % page_size;
      slots.push_back(slot);
      if (p >= seqs[q].cached) {
        step_slots.push_back(slot);
        step_positions.push_back(p);
      }
    }
    query_start.push_back(query_start.back() + seqs[q].new_tokens);
    context_len.push_back(seqs[q].cached + seqs[q].new_tokens);
  }
  std::normal_distribution<float> value(0.0f, 1.0f);
  std::vector<float> qkv(slots.size() * row);
  for (float& v : qkv) v = bf16_to_f32(f32_to_bf16(value(rng)));
  const size_t cache_values = static_cast<size_t>(num_pages) * 2 * kv_heads * page_size * head_dim;
  std::vector<float> f32_pages(cache_values, NAN);
  std::vector<uint16_t> bf16_pages(cache_values, 0x7fc0);  // NaN: a key read but not written shows
  ref::kv_write(w, qkv.data(), slots.data(), ref::KvPages{f32_pages.data(), layout}, static_cast<int64_t>(slots.size()));
  ref::kv_write(w, qkv.data(), slots.data(), ref::KvPages{nullptr, layout, bf16_pages.data()},
                static_cast<int64_t>(slots.size()));
  for (size_t i = 0; i < cache_values; ++i) {
    if (!std::isnan(f32_pages[i]) && bf16_to_f32(bf16_pages[i]) != f32_pages[i]) FAIL("kv_write's bf16 value " << i);
  }

  // This step's queries.
  const int32_t T = query_start.back();
  std::vector<float> q_rows(static_cast<size_t>(T) * row);
  for (float& v : q_rows) v = value(rng);
  std::vector<int32_t> token_ids(T, 0), logit_rows;
  StepBatch step;
  step.token_ids = token_ids;
  step.positions = step_positions;
  step.slot_mapping = step_slots;
  step.query_start = query_start;
  step.context_len = context_len;
  step.block_tables = block_tables;
  step.max_pages_per_seq = pages_per_seq;
  step.logit_rows = logit_rows;
  const size_t out_values = static_cast<size_t>(T) * heads * head_dim;
  std::vector<float> expect(out_values, NAN), got(out_values, NAN);
  ref::attention(s, q_rows.data(), ref::KvPages{f32_pages.data(), layout}, expect.data(), step, false);
  ref::attention(s, q_rows.data(), ref::KvPages{nullptr, layout, bf16_pages.data()}, got.data(), step, true);
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < out_values; ++i) {
    REQUIRE(std::isfinite(got[i]));
    err += (static_cast<double>(expect[i]) - got[i]) * (static_cast<double>(expect[i]) - got[i]);
    norm += static_cast<double>(expect[i]) * expect[i];
  }
  INFO("heads " << heads << "/" << kv_heads << ", head dim " << head_dim << ", pages of " << page_size);
  // The same products summed in another order, and exp by a polynomial within 2 ulp.
  CHECK(err / norm <= 1e-11);
}

}  // namespace

TEST_CASE("the fast CPU attention over bf16 KV pages equals the reference's over the same values", "[cpu]") {
  check_attention(9, 3, 64, 16);  // SmolLM2's heads
  check_attention(8, 2, 128, 5);  // Llama's head dim, pages that do not divide 16
  check_attention(6, 2, 48, 7);
  check_attention(4, 4, 20, 3);   // 4 values past the last 16
  check_attention(2, 1, 8, 4);    // no whole 16 at all
}

TEST_CASE("attention refuses KV pages of the other backend's format", "[cpu]") {
  const shape::attention s{.heads = 1, .kv_heads = 1, .head_dim = 16, .page_size = 4, .row = 48, .scale = 0.25f,
                           .partition = 512, .max_partitions = 1};
  float f32 = 0.0f;
  uint16_t bf16 = 0;
  StepBatch empty;
  CHECK_THROWS_WITH(ref::attention(s, nullptr, ref::KvPages{&f32, {1, 16, 4}}, nullptr, empty, true),
                    Catch::Contains("fp32 KV pages"));
  CHECK_THROWS_WITH(ref::attention(s, nullptr, ref::KvPages{nullptr, {1, 16, 4}, &bf16}, nullptr, empty, false),
                    Catch::Contains("bf16 KV pages"));
}
