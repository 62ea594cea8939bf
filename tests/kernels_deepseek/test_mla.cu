// The MLA pieces around attention against the CPU reference: rmsnorm_inplace (ref::rmsnorm with a
// row stride), mla_kv_write, mla_q_absorb, mla_v_up. Real DeepSeek-V2-Lite and V2 shapes and the
// tiny models' odd ones (kv_lora 24/32, rope 6/8, nope 8/16, v 10/12, 3/4 heads).
#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/dtype.hpp"
#include "runtime/ref/mla.hpp"
#include "runtime/ref/ops.hpp"
#include "templates/mla.cuh"
#include "templates/norm_inplace.cuh"
#include "tests/kernels_deepseek/deepseek_groups.hpp"
#include "tests/support/gpu_harness.hpp"

namespace kiln::kernel_test {

namespace {

constexpr float kEps = 1e-6f;

template <int kDim, int kRow>
void test_rmsnorm_inplace(const char* model, const std::vector<int>& token_counts, bool time_it) {
  std::mt19937 rng(20000 + kDim * 7 + kRow);
  const auto weight = random_bf16(kDim, rng, 1.0f);
  const auto weight_f = bf16_to_f32(weight);
  DeviceBuffer<uint16_t> d_weight(weight);
  for (int tokens : token_counts) {
    const auto rows = random_bf16(static_cast<size_t>(tokens) * kRow, rng, 2.0f);
    DeviceBuffer<uint16_t> d_rows(rows);
    auto run = [&] { kiln::rmsnorm_inplace<kDim, kRow>(as_bf16_mut(d_rows), as_bf16(d_weight), tokens, kEps, nullptr); };
    run();
    const std::string shape = std::string(model) + " dim " + std::to_string(kDim) + " row " + std::to_string(kRow) +
                              " tokens " + std::to_string(tokens);
    expect_clean_launch("rmsnorm_inplace " + shape);

    auto ref = bf16_to_f32(rows);
    ref::rmsnorm(ref.data(), kRow, weight_f.data(), ref.data(), kRow, tokens, kDim, kEps);
    const auto got = d_rows.download();
    std::vector<float> ref_part, got_part;
    bool tail_untouched = true;
    for (int t = 0; t < tokens; ++t) {
      for (int c = 0; c < kRow; ++c) {
        const size_t i = static_cast<size_t>(t) * kRow + c;
        if (c < kDim) {
          ref_part.push_back(ref[i]);
          got_part.push_back(kiln::bf16_to_f32(got[i]));
        } else {
          tail_untouched &= got[i] == rows[i];
        }
      }
    }
    const auto c = compare(ref_part, got_part);
    expect_close("rmsnorm_inplace " + shape, c, 5e-4);
    expect(tail_untouched, "rmsnorm_inplace " + shape + ": columns past kDim changed");
    if (time_it) {
      const double us = median_us([&](int) { run(); });
      report("rmsnorm_inplace", shape, c.nmse, us, 2.0 * tokens * kDim * 2, 0);
    }
  }
  kiln::rmsnorm_inplace<kDim, kRow>(nullptr, as_bf16(d_weight), 0, kEps, nullptr);
  expect_clean_launch("rmsnorm_inplace with 0 tokens");
}

template <int kLatent, int kRope, int kPageSize>
void test_kv_write(const char* model, int tokens) {
  constexpr int kWidth = kLatent + kRope;
  std::mt19937 rng(21000 + kWidth + tokens);
  const int num_pages = (tokens + kPageSize - 1) / kPageSize + 3;
  const auto cache = random_bf16(static_cast<size_t>(num_pages) * kPageSize * kWidth, rng);
  const auto kv_a = random_bf16(static_cast<size_t>(tokens) * kWidth, rng);
  std::vector<int> slots(static_cast<size_t>(num_pages) * kPageSize);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(tokens);
  if (tokens > 1) slots.back() = -1;  // a padding token: writes nothing

  DeviceBuffer<uint16_t> d_cache(cache), d_kv(kv_a);
  DeviceBuffer<int> d_slots(slots);
  kiln::mla_kv_write<kLatent, kRope, kPageSize>(as_bf16(d_kv), d_slots.get(), as_bf16_mut(d_cache), tokens, nullptr);
  const std::string shape = std::string(model) + " width " + std::to_string(kWidth) + " tokens " + std::to_string(tokens);
  expect_clean_launch("mla_kv_write " + shape);

  auto expected = cache;
  for (int t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    std::copy_n(kv_a.begin() + static_cast<size_t>(t) * kWidth, kWidth,
                expected.begin() + static_cast<size_t>(slots[t]) * kWidth);
  }
  expect(d_cache.download() == expected, "mla_kv_write " + shape + ": cache differs from the expected rows");
  kiln::mla_kv_write<kLatent, kRope, kPageSize>(as_bf16(d_kv), d_slots.get(), as_bf16_mut(d_cache), 0, nullptr);
  expect_clean_launch("mla_kv_write with 0 tokens");
}

template <int kHeads, int kNope, int kRope, int kLatent>
void test_q_absorb(const char* model, const std::vector<int>& token_counts, bool time_it) {
  constexpr int kIn = kNope + kRope, kOut = kLatent + kRope;
  std::mt19937 rng(22000 + kHeads * kLatent + kNope);
  const size_t w_elems = static_cast<size_t>(kHeads) * kNope * kLatent;
  const auto w_uk = random_bf16(w_elems, rng, 0.1f);
  const auto w_uk_f = bf16_to_f32(w_uk);
  DeviceBuffer<uint16_t> d_w(w_uk);
  std::optional<RotatingWeights> copies;  // for the timed calls: one set serves every token count
  if (time_it) copies.emplace(d_w);
  for (int tokens : token_counts) {
    const auto q = random_bf16(static_cast<size_t>(tokens) * kHeads * kIn, rng);
    DeviceBuffer<uint16_t> d_q(q), d_out(static_cast<size_t>(tokens) * kHeads * kOut);
    d_out.poison();
    auto run = [&](const __nv_bfloat16* w) {
      kiln::mla_q_absorb<kHeads, kNope, kRope, kLatent>(as_bf16(d_q), w, as_bf16_mut(d_out), tokens, nullptr);
    };
    run(as_bf16(d_w));
    const std::string shape = std::string(model) + " heads " + std::to_string(kHeads) + " nope " +
                              std::to_string(kNope) + " rope " + std::to_string(kRope) + " latent " +
                              std::to_string(kLatent) + " T " + std::to_string(tokens);
    expect_clean_launch("mla_q_absorb " + shape);
    std::vector<float> ref(static_cast<size_t>(tokens) * kHeads * kOut);
    ref::mla_q_absorb(bf16_to_f32(q).data(), tokens, kHeads, kNope, kRope, kLatent, w_uk_f.data(), ref.data());
    const auto c = compare(ref, bf16_to_f32(d_out.download()));
    expect_close("mla_q_absorb " + shape, c, 5e-4);
    if (copies) {
      const double us = median_us([&](int i) { run(copies->at(i)); });
      if (tokens <= 64) {
        report("mla_q_absorb", shape, c.nmse, us, w_elems * 2.0, 0);
      } else {
        report("mla_q_absorb", shape, c.nmse, us, 0, 2.0 * tokens * kHeads * kNope * kLatent);
      }
    }
  }
  kiln::mla_q_absorb<kHeads, kNope, kRope, kLatent>(nullptr, as_bf16(d_w), nullptr, 0, nullptr);
  expect_clean_launch("mla_q_absorb with 0 tokens");
}

template <int kHeads, int kLatent, int kV>
void test_v_up(const char* model, const std::vector<int>& token_counts, bool time_it) {
  std::mt19937 rng(23000 + kHeads * kLatent + kV);
  const size_t w_elems = static_cast<size_t>(kHeads) * kV * kLatent;
  const auto w_uv = random_bf16(w_elems, rng, 0.1f);
  const auto w_uv_f = bf16_to_f32(w_uv);
  DeviceBuffer<uint16_t> d_w(w_uv);
  std::optional<RotatingWeights> copies;  // for the timed calls: one set serves every token count
  if (time_it) copies.emplace(d_w);
  for (int tokens : token_counts) {
    const auto o_lat = random_bf16(static_cast<size_t>(tokens) * kHeads * kLatent, rng);
    DeviceBuffer<uint16_t> d_o(o_lat), d_out(static_cast<size_t>(tokens) * kHeads * kV);
    d_out.poison();
    auto run = [&](const __nv_bfloat16* w) {
      kiln::mla_v_up<kHeads, kLatent, kV>(as_bf16(d_o), w, as_bf16_mut(d_out), tokens, nullptr);
    };
    run(as_bf16(d_w));
    const std::string shape = std::string(model) + " heads " + std::to_string(kHeads) + " latent " +
                              std::to_string(kLatent) + " v " + std::to_string(kV) + " T " + std::to_string(tokens);
    expect_clean_launch("mla_v_up " + shape);
    std::vector<float> ref(static_cast<size_t>(tokens) * kHeads * kV);
    ref::mla_v_up(bf16_to_f32(o_lat).data(), tokens, kHeads, kLatent, kV, w_uv_f.data(), ref.data());
    const auto c = compare(ref, bf16_to_f32(d_out.download()));
    expect_close("mla_v_up " + shape, c, 5e-4);
    if (copies) {
      const double us = median_us([&](int i) { run(copies->at(i)); });
      if (tokens <= 64) {
        report("mla_v_up", shape, c.nmse, us, w_elems * 2.0, 0);
      } else {
        report("mla_v_up", shape, c.nmse, us, 0, 2.0 * tokens * kHeads * kV * kLatent);
      }
    }
  }
  kiln::mla_v_up<kHeads, kLatent, kV>(nullptr, as_bf16(d_w), nullptr, 0, nullptr);
  expect_clean_launch("mla_v_up with 0 tokens");
}

}  // namespace

void run_mla_tests() {
  const std::vector<int> decode = {1, 4, 64};
  const std::vector<int> all = {1, 4, 17, 64, 65, 300, 2048};
  const std::vector<int> odd = {1, 3, 9, 64, 65, 130};

  // ---- rmsnorm_inplace: kv latent (c_kv of c_kv | k_rope), q latent ----
  test_rmsnorm_inplace<512, 576>("deepseek-v2-lite kv_a", {1, 64, 2048}, true);
  test_rmsnorm_inplace<1536, 1536>("deepseek-v2 q_a", {1, 64, 2048}, true);
  test_rmsnorm_inplace<32, 40>("tiny-deepseek-v2 kv_a", odd, false);
  test_rmsnorm_inplace<24, 24>("tiny-deepseek-v2 q_a", odd, false);
  test_rmsnorm_inplace<24, 30>("tiny-deepseek-v2-lite kv_a", odd, false);

  // ---- mla_kv_write ----
  test_kv_write<512, 64, 16>("deepseek-v2-lite", 300);
  test_kv_write<512, 64, 16>("deepseek-v2-lite", 1);
  test_kv_write<32, 8, 16>("tiny-deepseek-v2", 37);
  test_kv_write<24, 6, 5>("tiny-deepseek-v2-lite", 37);

  // ---- mla_q_absorb ----
  test_q_absorb<16, 128, 64, 512>("deepseek-v2-lite", all, true);
  test_q_absorb<128, 128, 64, 512>("deepseek-v2", {1, 4, 64, 300}, true);
  test_q_absorb<4, 16, 8, 32>("tiny-deepseek-v2", odd, false);
  test_q_absorb<3, 8, 6, 24>("tiny-deepseek-v2-lite", odd, false);

  // ---- mla_v_up ----
  test_v_up<16, 512, 128>("deepseek-v2-lite", all, true);
  test_v_up<128, 512, 128>("deepseek-v2", {1, 4, 64, 300}, true);
  test_v_up<4, 32, 12>("tiny-deepseek-v2", odd, false);
  test_v_up<3, 24, 10>("tiny-deepseek-v2-lite", odd, false);
  test_v_up<5, 20, 16>("odd (streaming, 4-element rows)", odd, false);
  test_v_up<2, 13, 7>("odd (CUDA cores)", odd, false);
}

}  // namespace kiln::kernel_test
