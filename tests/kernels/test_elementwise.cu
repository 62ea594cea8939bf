// Embedding, RMSNorm (rows, selected rows, per head), RoPE, KV-cache write and SwiGLU against the
// CPU reference ops, at real model shapes and odd ones.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "runtime/core/dtype.hpp"
#include "runtime/model/rope_table.hpp"
#include "runtime/ref/ops.hpp"
#include "templates/activation.cuh"
#include "templates/embedding.cuh"
#include "templates/kv_cache.cuh"
#include "templates/norm.cuh"
#include "templates/rope.cuh"
#include "tests/kernels/test_groups.hpp"
#include "tests/support/gpu_harness.hpp"

namespace kiln::kernel_test {

namespace {

constexpr double kBf16Limit = 5e-4;

template <int kDim>
void test_embed(int vocab, int tokens) {
  std::mt19937 rng(1000 + kDim + tokens);
  const auto table = random_bf16(static_cast<size_t>(vocab) * kDim, rng);
  std::vector<int> ids(tokens);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  for (auto& id : ids) id = pick(rng);
  DeviceBuffer<uint16_t> d_table(table);
  DeviceBuffer<int> d_ids(ids);
  DeviceBuffer<float> d_x(static_cast<size_t>(tokens) * kDim);
  d_x.poison();
  kiln::embed<kDim>(d_ids.get(), as_bf16(d_table), d_x.get(), tokens, nullptr);
  expect_clean_launch("embed");
  std::vector<float> ref(static_cast<size_t>(tokens) * kDim);
  ref::embed(ids.data(), tokens, bf16_to_f32(table).data(), vocab, kDim, ref.data());
  const auto c = compare(ref, d_x.download());
  const std::string shape = dims({kDim, vocab, tokens}, "dim vocab tokens");
  expect_close("embed " + shape, c, 0.0);
  const double us = median_us([&](int) { kiln::embed<kDim>(d_ids.get(), as_bf16(d_table), d_x.get(), tokens, nullptr); });
  report("embed", shape, c.nmse, us, static_cast<double>(tokens) * kDim * 6, 0);
  kiln::embed<kDim>(d_ids.get(), as_bf16(d_table), d_x.get(), 0, nullptr);
  expect_clean_launch("embed with 0 tokens");
}

template <int kDim>
void test_rmsnorm(int rows) {
  std::mt19937 rng(2000 + kDim + rows);
  const float eps = 1e-5f;
  const auto x = random_f32(static_cast<size_t>(rows) * kDim, rng, 3.0f);
  const auto weight = random_bf16(kDim, rng);
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<uint16_t> d_w(weight), d_out(static_cast<size_t>(rows) * kDim);
  d_out.poison();
  kiln::rmsnorm<kDim>(d_x.get(), as_bf16(d_w), as_bf16_mut(d_out), rows, eps, nullptr);
  expect_clean_launch("rmsnorm");
  std::vector<float> ref(static_cast<size_t>(rows) * kDim);
  ref::rmsnorm(x.data(), bf16_to_f32(weight).data(), ref.data(), rows, kDim, eps);
  const auto c = compare(ref, bf16_to_f32(d_out.download()));
  const std::string shape = dims({kDim, rows}, "dim rows");
  expect_close("rmsnorm " + shape, c, kBf16Limit);
  const double us = median_us(
      [&](int) { kiln::rmsnorm<kDim>(d_x.get(), as_bf16(d_w), as_bf16_mut(d_out), rows, eps, nullptr); });
  report("rmsnorm", shape, c.nmse, us, static_cast<double>(rows) * kDim * 6 + kDim * 2, 0);
  kiln::rmsnorm<kDim>(d_x.get(), as_bf16(d_w), as_bf16_mut(d_out), 0, eps, nullptr);
  expect_clean_launch("rmsnorm with 0 rows");
}

template <int kDim>
void test_rmsnorm_rows(int rows, std::vector<int> selected) {
  std::mt19937 rng(3000 + kDim + rows);
  const float eps = 1e-6f;
  const auto x = random_f32(static_cast<size_t>(rows) * kDim, rng, 2.0f);
  const auto weight = random_bf16(kDim, rng);
  const int n = static_cast<int>(selected.size());
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<int> d_rows(selected);
  DeviceBuffer<uint16_t> d_w(weight), d_out(static_cast<size_t>(n) * kDim);
  d_out.poison();
  kiln::rmsnorm_rows<kDim>(d_x.get(), d_rows.get(), as_bf16(d_w), as_bf16_mut(d_out), n, eps, nullptr);
  expect_clean_launch("rmsnorm_rows");
  std::vector<float> ref(static_cast<size_t>(n) * kDim);
  ref::rmsnorm_rows(x.data(), selected.data(), n, bf16_to_f32(weight).data(), ref.data(), kDim, eps);
  const auto c = compare(ref, bf16_to_f32(d_out.download()));
  const std::string shape = dims({kDim, rows, n}, "dim rows selected");
  expect_close("rmsnorm_rows " + shape, c, kBf16Limit);
  const double us = median_us([&](int) {
    kiln::rmsnorm_rows<kDim>(d_x.get(), d_rows.get(), as_bf16(d_w), as_bf16_mut(d_out), n, eps, nullptr);
  });
  report("rmsnorm_rows", shape, c.nmse, us, static_cast<double>(n) * kDim * 6 + kDim * 2, 0);
}

// Elements of a row that an in-place op must leave bit-identical keep their bf16 bits.
void expect_untouched(const std::string& what, const std::vector<uint16_t>& before, const std::vector<uint16_t>& after,
                      const std::vector<bool>& changes) {
  long long moved = 0;
  for (size_t i = 0; i < before.size(); ++i) moved += !changes[i] && before[i] != after[i];
  expect(moved == 0, what + ": " + std::to_string(moved) + " elements outside the op's range changed");
}

template <int kHeads, int kKvHeads, int kHeadDim, int kRow>
void test_qk_rmsnorm(int tokens) {
  std::mt19937 rng(4000 + kHeadDim + tokens);
  const float eps = 1e-6f;
  const auto rows = random_bf16(static_cast<size_t>(tokens) * kRow, rng, 2.0f);
  const auto qw = random_bf16(kHeadDim, rng), kw = random_bf16(kHeadDim, rng);
  DeviceBuffer<uint16_t> d_rows(rows), d_qw(qw), d_kw(kw);
  kiln::qk_rmsnorm<kHeads, kKvHeads, kHeadDim, kRow>(as_bf16_mut(d_rows), as_bf16(d_qw), as_bf16(d_kw), tokens, eps,
                                                     nullptr);
  expect_clean_launch("qk_rmsnorm");
  auto ref = bf16_to_f32(rows);
  ref::head_rmsnorm(ref.data(), tokens, kRow, 0, kHeads, kHeadDim, bf16_to_f32(qw).data(), eps);
  ref::head_rmsnorm(ref.data(), tokens, kRow, kHeads * kHeadDim, kKvHeads, kHeadDim, bf16_to_f32(kw).data(), eps);
  const auto got = d_rows.download();
  const auto c = compare(ref, bf16_to_f32(got));
  const std::string shape = dims({kHeads, kKvHeads, kHeadDim, kRow, tokens}, "heads kv_heads head_dim row tokens");
  expect_close("qk_rmsnorm " + shape, c, kBf16Limit);
  std::vector<bool> changes(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) changes[i] = static_cast<int>(i % kRow) < (kHeads + kKvHeads) * kHeadDim;
  expect_untouched("qk_rmsnorm " + shape, rows, got, changes);
  const double us = median_us([&](int) {
    kiln::qk_rmsnorm<kHeads, kKvHeads, kHeadDim, kRow>(as_bf16_mut(d_rows), as_bf16(d_qw), as_bf16(d_kw), tokens,
                                                       eps, nullptr);
  });
  report("qk_rmsnorm", shape, c.nmse, us, 4.0 * tokens * (kHeads + kKvHeads) * kHeadDim, 0);
}

template <int kHeads, int kHeadStride, int kRotaryDim, int kRow, bool kInterleaved>
void test_rope(int offset, int tokens, int max_position) {
  std::mt19937 rng(5000 + kRotaryDim + tokens + offset);
  const auto rows = random_bf16(static_cast<size_t>(tokens) * kRow, rng);
  std::vector<int> positions(tokens);
  std::uniform_int_distribution<int> pick(0, max_position - 1);
  for (auto& p : positions) p = pick(rng);
  const auto table = build_rope_table(RopeInfo{.theta = 10000.0, .rotary_dim = kRotaryDim}, max_position);
  DeviceBuffer<uint16_t> d_rows(rows);
  DeviceBuffer<int> d_pos(positions);
  DeviceBuffer<float> d_table(table);
  kiln::rope<kHeads, kHeadStride, kRotaryDim, kRow, kInterleaved>(as_bf16_mut(d_rows), offset, d_pos.get(),
                                                                  d_table.get(), tokens, nullptr);
  expect_clean_launch("rope");
  auto ref = bf16_to_f32(rows);
  ref::rope(ref.data(), tokens, kRow, offset, kHeads, kHeadStride, kRotaryDim, kInterleaved, positions.data(),
            table.data());
  const auto got = d_rows.download();
  const auto c = compare(ref, bf16_to_f32(got));
  const std::string shape = dims({kHeads, kHeadStride, kRotaryDim, kRow, offset, tokens},
                                 kInterleaved ? "interleaved: heads stride rotary row offset tokens"
                                              : "heads stride rotary row offset tokens");
  expect_close("rope " + shape, c, kBf16Limit);
  std::vector<bool> changes(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const int col = static_cast<int>(i % kRow) - offset;
    changes[i] = col >= 0 && col / kHeadStride < kHeads && col % kHeadStride < kRotaryDim;
  }
  expect_untouched("rope " + shape, rows, got, changes);
  const double us = median_us([&](int) {
    kiln::rope<kHeads, kHeadStride, kRotaryDim, kRow, kInterleaved>(as_bf16_mut(d_rows), offset, d_pos.get(),
                                                                    d_table.get(), tokens, nullptr);
  });
  report("rope", shape, c.nmse, us, 4.0 * tokens * kHeads * kRotaryDim, 0);
}

template <int kKvHeads, int kHeadDim, int kPageSize, int kRow>
void test_kv_write(int k_offset, int v_offset, int tokens) {
  std::mt19937 rng(6000 + kHeadDim + tokens + k_offset);
  const int num_pages = tokens / kPageSize + 3;
  const auto rows = random_bf16(static_cast<size_t>(tokens) * kRow, rng);
  std::vector<int> slots(static_cast<size_t>(num_pages) * kPageSize);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(tokens);
  const size_t cache_elems = static_cast<size_t>(num_pages) * 2 * kKvHeads * kPageSize * kHeadDim;
  DeviceBuffer<uint16_t> d_rows(rows), d_cache(cache_elems);
  DeviceBuffer<int> d_slots(slots);
  d_cache.poison();
  kiln::kv_write<kKvHeads, kHeadDim, kPageSize, kRow>(as_bf16(d_rows), k_offset, v_offset, d_slots.get(),
                                                      as_bf16_mut(d_cache), tokens, nullptr);
  expect_clean_launch("kv_write");
  std::vector<float> ref(cache_elems, NAN);
  ref::kv_write(bf16_to_f32(rows).data(), tokens, kRow, k_offset, v_offset, slots.data(),
                ref::KvPages{ref.data(), kKvHeads, kHeadDim, kPageSize});
  const auto got = bf16_to_f32(d_cache.download());
  long long wrong = 0;
  for (size_t i = 0; i < cache_elems; ++i) {
    const bool both_nan = std::isnan(ref[i]) && std::isnan(got[i]);
    wrong += !both_nan && ref[i] != got[i];
  }
  const std::string shape =
      dims({kKvHeads, kHeadDim, kPageSize, kRow, k_offset, v_offset, tokens}, "kv_heads head_dim page row k v tokens");
  expect(wrong == 0, "kv_write " + shape + ": " + std::to_string(wrong) + " cache elements differ (exact copy expected)");
  const double us = median_us([&](int) {
    kiln::kv_write<kKvHeads, kHeadDim, kPageSize, kRow>(as_bf16(d_rows), k_offset, v_offset, d_slots.get(),
                                                        as_bf16_mut(d_cache), tokens, nullptr);
  });
  report("kv_write", shape, wrong == 0 ? 0.0 : 1.0, us, 8.0 * tokens * kKvHeads * kHeadDim, 0);
  kiln::kv_write<kKvHeads, kHeadDim, kPageSize, kRow>(as_bf16(d_rows), k_offset, v_offset, d_slots.get(),
                                                      as_bf16_mut(d_cache), 0, nullptr);
  expect_clean_launch("kv_write with 0 tokens");
}

template <int kDim>
void test_silu_mul(int tokens) {
  std::mt19937 rng(7000 + kDim + tokens);
  const auto gate_up = random_bf16(static_cast<size_t>(tokens) * 2 * kDim, rng, 3.0f);
  DeviceBuffer<uint16_t> d_in(gate_up), d_out(static_cast<size_t>(tokens) * kDim);
  d_out.poison();
  kiln::silu_mul<kDim>(as_bf16(d_in), as_bf16_mut(d_out), tokens, nullptr);
  expect_clean_launch("silu_mul");
  std::vector<float> ref(static_cast<size_t>(tokens) * kDim);
  ref::silu_mul(bf16_to_f32(gate_up).data(), tokens, kDim, ref.data());
  const auto c = compare(ref, bf16_to_f32(d_out.download()));
  const std::string shape = dims({kDim, tokens}, "dim tokens");
  expect_close("silu_mul " + shape, c, kBf16Limit);
  const double us = median_us([&](int) { kiln::silu_mul<kDim>(as_bf16(d_in), as_bf16_mut(d_out), tokens, nullptr); });
  report("silu_mul", shape, c.nmse, us, 6.0 * tokens * kDim, 0);
  kiln::silu_mul<kDim>(as_bf16(d_in), as_bf16_mut(d_out), 0, nullptr);
  expect_clean_launch("silu_mul with 0 tokens");
}

}  // namespace

void run_elementwise_tests() {
  // Llama-3.2-1B 2048, Qwen3-0.6B 1024, SmolLM2-135M 576; odd 200, 144, 1000, 999 (odd: scalar paths).
  test_embed<2048>(128256, 1);
  test_embed<2048>(128256, 2048);
  test_embed<576>(49152, 37);
  test_embed<200>(1000, 300);
  test_embed<999>(500, 9);

  test_rmsnorm<2048>(1);
  test_rmsnorm<2048>(2048);
  test_rmsnorm<1024>(64);
  test_rmsnorm<576>(7);
  test_rmsnorm<200>(300);
  test_rmsnorm<1000>(3);
  test_rmsnorm<999>(5);
  test_rmsnorm<8192>(4);

  test_rmsnorm_rows<2048>(300, {299, 0, 17, 17, 150});
  test_rmsnorm_rows<576>(64, {3});
  test_rmsnorm_rows<144>(10, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0});

  test_qk_rmsnorm<16, 8, 128, 4096>(1);       // Qwen3-0.6B decode
  test_qk_rmsnorm<16, 8, 128, 4096>(2048);    // Qwen3-0.6B prefill
  test_qk_rmsnorm<4, 2, 32, 256>(33);         // tiny-qwen3
  test_qk_rmsnorm<6, 2, 48, 480>(77);         // odd: 6 heads / 2 KV heads × 48
  test_qk_rmsnorm<3, 1, 40, 200>(5);          // odd: head dim 40, row 200

  test_rope<40, 64, 64, 3072, false>(0, 1, 8192);       // Llama-3.2-1B q+k heads
  test_rope<40, 64, 64, 3072, false>(0, 2048, 8192);
  test_rope<24, 128, 128, 4096, false>(0, 16, 4096);    // Qwen3-0.6B
  test_rope<8, 48, 48, 480, false>(0, 100, 1000);       // odd: head dim 48
  test_rope<6, 48, 32, 480, true>(96, 20, 300);         // interleaved, partial rotary, nonzero offset
  test_rope<3, 24, 16, 100, false>(7, 9, 50);           // odd offset

  test_kv_write<8, 64, 16, 3072>(2048, 2560, 1);        // Llama-3.2-1B decode
  test_kv_write<8, 64, 16, 3072>(2048, 2560, 2048);     // Llama-3.2-1B prefill
  test_kv_write<8, 128, 16, 4096>(2048, 3072, 64);      // Qwen3-0.6B
  test_kv_write<2, 48, 5, 480>(288, 384, 123);          // odd: page size 5, head dim 48
  test_kv_write<2, 32, 8, 257>(129, 193, 40);           // odd row and offsets: scalar path

  test_silu_mul<8192>(1);
  test_silu_mul<8192>(2048);
  test_silu_mul<1536>(64);
  test_silu_mul<200>(33);
  test_silu_mul<999>(7);
}

}  // namespace kiln::kernel_test
