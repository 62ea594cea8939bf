// Absorbed MLA attention over the paged latent cache against ref::mla_attention: several sequences
// (context lengths 1, 7, 300, 1500) with pages handed out in shuffled order; prefill with cached
// prefixes, decode with small partitions (64) so that several partitions are merged, and the
// generated configuration (partitions of 512). Real DeepSeek-V2-Lite / V2 shapes, odd ones (20
// heads, pages of 5) and the tiny models' (CUDA-core path).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/step_batch.hpp"
#include "runtime/ref/mla.hpp"
#include "templates/mla_attention.cuh"
#include "tests/kernels_deepseek/deepseek_groups.hpp"
#include "tests/support/gpu_harness.hpp"

namespace kiln::kernel_test {

namespace {

constexpr float kRealScale = 0.11472139f;  // DeepSeek-V2(-Lite): 192^-0.5 × yarn mscale²

// A batch of sequences over a random latent cache: sequence s has cached[s] rows already cached
// and fresh[s] new tokens (whose rows mla_kv_write has also stored).
struct LatentBatch {
  StepBatch step;
  int num_pages = 0;
  std::vector<uint16_t> cache;  // one layer: [num_pages][page_size][width]
};

LatentBatch make_batch(const std::vector<std::pair<int, int>>& seqs, int width, int page_size, std::mt19937& rng) {
  LatentBatch b;
  b.step = paged_step(seqs, page_size, rng, b.num_pages);
  b.cache = random_bf16(static_cast<size_t>(b.num_pages) * page_size * width, rng);
  return b;
}

template <int kHeads, int kLatent, int kRope, int kPageSize>
void test_prefill(const char* model, const std::vector<std::pair<int, int>>& seqs, float scale, bool time_it) {
  constexpr int kWidth = kLatent + kRope;
  std::mt19937 rng(24000 + kHeads * kLatent + kPageSize + static_cast<int>(seqs.size()));
  LatentBatch b = make_batch(seqs, kWidth, kPageSize, rng);
  const int tokens = b.step.num_tokens(), num_seqs = b.step.num_seqs();
  int max_query_len = 0;
  for (const auto& s : seqs) max_query_len = std::max(max_query_len, s.second);
  const auto q = random_bf16(static_cast<size_t>(tokens) * kHeads * kWidth, rng, 0.5f);

  DeviceBuffer<uint16_t> d_q(q), d_cache(b.cache), d_out(static_cast<size_t>(tokens) * kHeads * kLatent);
  DeviceBuffer<int> d_qs(b.step.query_start), d_pos(b.step.positions), d_bt(b.step.block_tables);
  d_out.poison();
  auto run = [&] {
    kiln::mla_attention_prefill<kHeads, kLatent, kRope, kPageSize>(
        as_bf16(d_q), as_bf16(d_cache), as_bf16_mut(d_out), d_qs.get(), d_pos.get(), d_bt.get(),
        b.step.max_pages_per_seq, num_seqs, max_query_len, scale, nullptr);
  };
  run();
  const std::string shape = std::string(model) + " heads " + std::to_string(kHeads) + " latent " +
                            std::to_string(kLatent) + "+" + std::to_string(kRope) + " page " +
                            std::to_string(kPageSize) + " seqs " + seq_list(seqs);
  expect_clean_launch("mla_attention_prefill " + shape);

  auto cache_f = bf16_to_f32(b.cache);
  std::vector<float> ref(static_cast<size_t>(tokens) * kHeads * kLatent);
  ref::mla_attention(bf16_to_f32(q).data(), kHeads, kLatent, kRope, scale, b.step,
                     ref::LatentPages{cache_f.data(), kWidth, kPageSize}, ref.data());
  const auto c = compare(ref, bf16_to_f32(d_out.download()));
  expect_close("mla_attention_prefill " + shape, c, 5e-4);
  if (time_it) {
    double keys = 0;
    for (int p : b.step.positions) keys += p + 1;
    const double us = median_us([&](int) { run(); }, 3, 20);
    report("mla_attention_prefill", shape, c.nmse, us, 0, 2.0 * keys * kHeads * (kWidth + kLatent));
  }
}

template <int kHeads, int kLatent, int kRope, int kPageSize, int kPartition, int kMaxPartitions>
void test_decode(const char* model, const std::vector<int>& contexts, float scale, bool time_it) {
  constexpr int kWidth = kLatent + kRope;
  std::mt19937 rng(25000 + kHeads * kLatent + kPartition + static_cast<int>(contexts.size()));
  std::vector<std::pair<int, int>> seqs;
  for (int c : contexts) seqs.emplace_back(c - 1, 1);
  LatentBatch b = make_batch(seqs, kWidth, kPageSize, rng);
  const int num_seqs = b.step.num_seqs();
  const auto q = random_bf16(static_cast<size_t>(num_seqs) * kHeads * kWidth, rng, 0.5f);

  DeviceBuffer<uint16_t> d_q(q), d_cache(b.cache), d_out(static_cast<size_t>(num_seqs) * kHeads * kLatent);
  DeviceBuffer<int> d_ctx(b.step.context_len), d_bt(b.step.block_tables);
  DeviceBuffer<float> d_scratch(static_cast<size_t>(num_seqs) * kHeads * kMaxPartitions * (kLatent + 2));
  d_out.poison();
  d_scratch.poison();
  auto run = [&] {
    kiln::mla_attention_decode<kHeads, kLatent, kRope, kPageSize, kPartition, kMaxPartitions>(
        as_bf16(d_q), as_bf16(d_cache), as_bf16_mut(d_out), d_ctx.get(), d_bt.get(), b.step.max_pages_per_seq,
        num_seqs, scale, d_scratch.get(), nullptr);
  };
  run();
  const std::string ctx = contexts.size() > 8 ? std::to_string(contexts.size()) + " seqs" : join(contexts);
  const std::string shape = std::string(model) + " heads " + std::to_string(kHeads) + " latent " +
                            std::to_string(kLatent) + "+" + std::to_string(kRope) + " part " +
                            std::to_string(kPartition) + " ctx " + ctx;
  expect_clean_launch("mla_attention_decode " + shape);

  auto cache_f = bf16_to_f32(b.cache);
  std::vector<float> ref(static_cast<size_t>(num_seqs) * kHeads * kLatent);
  ref::mla_attention(bf16_to_f32(q).data(), kHeads, kLatent, kRope, scale, b.step,
                     ref::LatentPages{cache_f.data(), kWidth, kPageSize}, ref.data());
  const auto c = compare(ref, bf16_to_f32(d_out.download()));
  expect_close("mla_attention_decode " + shape, c, 5e-4);
  if (time_it) {
    double kv_bytes = 0;
    for (int x : contexts) kv_bytes += 2.0 * x * kWidth;
    const double us = median_us([&](int) { run(); });
    report("mla_attention_decode", shape, c.nmse, us, kv_bytes, 0);
  }
  kiln::mla_attention_decode<kHeads, kLatent, kRope, kPageSize, kPartition, kMaxPartitions>(
      as_bf16(d_q), as_bf16(d_cache), as_bf16_mut(d_out), d_ctx.get(), d_bt.get(), b.step.max_pages_per_seq, 0, scale,
      d_scratch.get(), nullptr);
  expect_clean_launch("mla_attention_decode with 0 sequences");
}

}  // namespace

void run_mla_attention_tests() {
  // ---- prefill: (cached, new) per sequence; contexts 1, 7, 300, 1500 ----
  const std::vector<std::pair<int, int>> mixed = {{0, 1}, {0, 7}, {0, 300}, {1200, 300}};
  test_prefill<16, 512, 64, 16>("deepseek-v2-lite", mixed, kRealScale, true);
  test_prefill<128, 512, 64, 16>("deepseek-v2", {{0, 1}, {0, 7}, {250, 50}, {1480, 20}}, kRealScale, true);
  test_prefill<16, 512, 64, 5>("odd page 5", {{0, 70}, {33, 9}, {0, 1}}, kRealScale, false);
  test_prefill<20, 512, 64, 16>("odd 20 heads", {{0, 33}, {100, 3}}, kRealScale, false);
  test_prefill<4, 32, 8, 16>("tiny-deepseek-v2", {{0, 37}, {5, 3}, {0, 1}}, 0.24609782f, false);
  test_prefill<3, 24, 6, 5>("tiny-deepseek-v2-lite", {{0, 37}, {5, 3}, {0, 1}}, 0.26726124f, false);
  // A 2048-token prompt: attention must not be the bottleneck of prefill.
  test_prefill<16, 512, 64, 16>("deepseek-v2-lite", {{0, 2048}}, kRealScale, true);

  // ---- decode: small partitions so several partitions are merged ----
  const std::vector<int> contexts = {1, 7, 300, 1500};
  test_decode<16, 512, 64, 16, 64, 32>("deepseek-v2-lite", contexts, kRealScale, true);
  test_decode<128, 512, 64, 16, 64, 32>("deepseek-v2", contexts, kRealScale, true);
  test_decode<20, 512, 64, 5, 64, 32>("odd 20 heads page 5", contexts, kRealScale, false);
  // The generated configuration: partitions of 512 up to 8192 keys.
  test_decode<16, 512, 64, 16, 512, 16>("deepseek-v2-lite", {1, 513, 4000, 8192}, kRealScale, true);
  std::vector<int> batch(64);
  for (int i = 0; i < 64; ++i) batch[i] = 1 + (i * 997) % 3000;
  test_decode<16, 512, 64, 16, 512, 16>("deepseek-v2-lite", batch, kRealScale, true);
  test_decode<4, 32, 8, 16, 512, 1>("tiny-deepseek-v2", {1, 100, 512}, 0.24609782f, false);
  test_decode<3, 24, 6, 16, 512, 1>("tiny-deepseek-v2-lite", {1, 100, 512}, 0.26726124f, false);
}

}  // namespace kiln::kernel_test
