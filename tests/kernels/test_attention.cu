// Prefill and decode attention over a paged KV cache against ref::attention: several sequences of
// different lengths, pages handed out in shuffled order, real model head layouts and odd ones
// (head dim 48 and 40, page size 5, 6 heads / 2 KV heads).
#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/step_batch.hpp"
#include "runtime/ref/ops.hpp"
#include "templates/attention.cuh"
#include "tests/kernels/test_groups.hpp"
#include "tests/support/gpu_harness.hpp"

namespace kiln::kernel_test {

namespace {

// A batch of sequences over a randomly filled cache: sequence s has cached[s] keys already in the
// cache and fresh[s] new tokens (whose keys kv_write has also stored).
struct PagedBatch {
  StepBatch step;
  int num_pages = 0;
  std::vector<uint16_t> cache;  // one layer: [num_pages][2][kv_heads][page_size][head_dim]
};

PagedBatch make_batch(const std::vector<std::pair<int, int>>& seqs, int kv_heads, int head_dim, int page_size,
                      std::mt19937& rng) {
  PagedBatch b;
  b.step = paged_step(seqs, page_size, rng, b.num_pages);
  b.cache = random_bf16(static_cast<size_t>(b.num_pages) * 2 * kv_heads * page_size * head_dim, rng);
  return b;
}

double causal_flops(const StepBatch& step, int heads, int head_dim) {
  double keys = 0;
  for (int p : step.positions) keys += p + 1;
  return 4.0 * keys * heads * head_dim;  // q·k and p·v, 2 flops per multiply-add
}

template <int kHeads, int kKvHeads, int kHeadDim, int kPageSize, int kRow>
void test_prefill(const char* model, const std::vector<std::pair<int, int>>& seqs, bool time_it) {
  std::mt19937 rng(9000 + kHeads * kHeadDim + static_cast<int>(seqs.size()));
  PagedBatch b = make_batch(seqs, kKvHeads, kHeadDim, kPageSize, rng);
  const int tokens = b.step.num_tokens(), num_seqs = b.step.num_seqs();
  int max_query_len = 0;
  for (const auto& s : seqs) max_query_len = std::max(max_query_len, s.second);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  const auto q = random_bf16(static_cast<size_t>(tokens) * kRow, rng);

  DeviceBuffer<uint16_t> d_q(q), d_cache(b.cache), d_out(static_cast<size_t>(tokens) * kHeads * kHeadDim);
  DeviceBuffer<int> d_qs(b.step.query_start), d_pos(b.step.positions), d_bt(b.step.block_tables);
  d_out.poison();
  auto run = [&] {
    kiln::attention_prefill<kHeads, kKvHeads, kHeadDim, kPageSize, kRow>(
        as_bf16(d_q), as_bf16(d_cache), as_bf16_mut(d_out), d_qs.get(), d_pos.get(), d_bt.get(),
        b.step.max_pages_per_seq, num_seqs, max_query_len, scale, nullptr);
  };
  run();
  KILN_CUDA_OK(cudaDeviceSynchronize());
  KILN_CUDA_OK(cudaGetLastError());

  auto cache_f = bf16_to_f32(b.cache);
  std::vector<float> ref(static_cast<size_t>(tokens) * kHeads * kHeadDim);
  ref::attention(bf16_to_f32(q).data(), kRow, kHeads, scale, b.step,
                 ref::KvPages{cache_f.data(), kKvHeads, kHeadDim, kPageSize}, ref.data());
  const auto c = compare(ref, bf16_to_f32(d_out.download()));
  const std::string shape = std::string(model) + " heads " + std::to_string(kHeads) + "/" + std::to_string(kKvHeads) +
                            "x" + std::to_string(kHeadDim) + " page " + std::to_string(kPageSize) + " seqs " +
                            seq_list(seqs);
  expect_close("attention_prefill " + shape, c, 5e-4);
  if (time_it) {
    const double us = median_us([&](int) { run(); }, 3, 20);
    report("attention_prefill", shape, c.nmse, us, 0, causal_flops(b.step, kHeads, kHeadDim));
  }
}

template <int kHeads, int kKvHeads, int kHeadDim, int kPageSize, int kRow, int kPartition, int kMaxPartitions>
void test_decode(const char* model, const std::vector<int>& contexts, bool time_it) {
  std::mt19937 rng(10000 + kHeads * kHeadDim + static_cast<int>(contexts.size()));
  std::vector<std::pair<int, int>> seqs;
  for (int c : contexts) seqs.emplace_back(c - 1, 1);
  PagedBatch b = make_batch(seqs, kKvHeads, kHeadDim, kPageSize, rng);
  const int num_seqs = b.step.num_seqs();
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  const auto q = random_bf16(static_cast<size_t>(num_seqs) * kRow, rng);

  DeviceBuffer<uint16_t> d_q(q), d_cache(b.cache), d_out(static_cast<size_t>(num_seqs) * kHeads * kHeadDim);
  DeviceBuffer<int> d_ctx(b.step.context_len), d_bt(b.step.block_tables);
  DeviceBuffer<float> d_scratch(static_cast<size_t>(num_seqs) * kHeads * kMaxPartitions * (kHeadDim + 2));
  d_out.poison();
  d_scratch.poison();
  auto run = [&] {
    kiln::attention_decode<kHeads, kKvHeads, kHeadDim, kPageSize, kRow, kPartition, kMaxPartitions>(
        as_bf16(d_q), as_bf16(d_cache), as_bf16_mut(d_out), d_ctx.get(), d_bt.get(), b.step.max_pages_per_seq,
        num_seqs, scale, d_scratch.get(), nullptr);
  };
  run();
  KILN_CUDA_OK(cudaDeviceSynchronize());
  KILN_CUDA_OK(cudaGetLastError());

  auto cache_f = bf16_to_f32(b.cache);
  std::vector<float> ref(static_cast<size_t>(num_seqs) * kHeads * kHeadDim);
  ref::attention(bf16_to_f32(q).data(), kRow, kHeads, scale, b.step,
                 ref::KvPages{cache_f.data(), kKvHeads, kHeadDim, kPageSize}, ref.data());
  const auto c = compare(ref, bf16_to_f32(d_out.download()));
  const std::string shape = std::string(model) + " heads " + std::to_string(kHeads) + "/" + std::to_string(kKvHeads) +
                            "x" + std::to_string(kHeadDim) + " page " + std::to_string(kPageSize) + " part " +
                            std::to_string(kPartition) + " ctx " + join(contexts);
  expect_close("attention_decode " + shape, c, 5e-4);
  if (time_it) {
    double kv_bytes = 0;
    for (int x : contexts) kv_bytes += 2.0 * x * kKvHeads * kHeadDim * 2;
    const double us = median_us([&](int) { run(); });
    report("attention_decode", shape, c.nmse, us, kv_bytes, 0);
  }
}

}  // namespace

void run_attention_tests() {
  // ---- prefill: (cached, new) per sequence ----
  const std::vector<std::pair<int, int>> mixed = {{0, 300}, {700, 1}, {50, 77}, {0, 1}, {1000, 130}};
  test_prefill<32, 8, 64, 16, 3072>("llama-3.2-1b", mixed, true);
  test_prefill<16, 8, 128, 16, 4096>("qwen3-0.6b", mixed, true);
  test_prefill<9, 3, 64, 16, 960>("smollm2-135m", mixed, true);
  test_prefill<6, 2, 48, 5, 480>("odd", mixed, true);
  test_prefill<4, 2, 16, 8, 128>("tiny-llama", {{0, 37}, {5, 3}}, false);
  test_prefill<4, 2, 32, 5, 256>("tiny-qwen3", {{0, 64}, {13, 1}, {0, 65}}, false);
  test_prefill<6, 2, 40, 5, 400>("odd head dim 40 (CUDA cores)", {{0, 70}, {33, 9}}, false);
  test_prefill<6, 6, 64, 7, 1152>("odd no GQA", {{0, 129}, {200, 64}}, false);
  // 2048-token prompts: prefill attention must not be the bottleneck.
  test_prefill<32, 8, 64, 16, 3072>("llama-3.2-1b", {{0, 2048}}, true);
  test_prefill<16, 8, 128, 16, 4096>("qwen3-0.6b", {{0, 2048}}, true);

  // ---- decode: context lengths; small partitions so several partitions and the merge run ----
  const std::vector<int> contexts = {1, 7, 200, 1500};
  test_decode<32, 8, 64, 16, 3072, 64, 32>("llama-3.2-1b", contexts, true);
  test_decode<16, 8, 128, 16, 4096, 64, 32>("qwen3-0.6b", contexts, true);
  test_decode<9, 3, 64, 16, 960, 64, 32>("smollm2-135m", contexts, true);
  test_decode<6, 2, 48, 5, 480, 64, 32>("odd", contexts, true);
  test_decode<6, 2, 40, 5, 400, 64, 32>("odd head dim 40", contexts, false);
  // The generated configuration: partitions of 512 up to 8192 keys.
  test_decode<32, 8, 64, 16, 3072, 512, 16>("llama-3.2-1b", {1, 513, 4000, 8192}, true);
  test_decode<4, 2, 32, 5, 256, 512, 1>("tiny-qwen3", {1, 100, 512}, false);
  // Batch of 64 decodes.
  std::vector<int> batch(64);
  for (int i = 0; i < 64; ++i) batch[i] = 1 + (i * 997) % 3000;
  test_decode<32, 8, 64, 16, 3072, 512, 16>("llama-3.2-1b", batch, true);
}

}  // namespace kiln::kernel_test
