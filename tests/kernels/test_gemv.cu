// Decode GEMV against ref::linear for every output mode, at real projection shapes and odd ones,
// over token counts that exercise each tile width and the multi-pass path (> 64 tokens).
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/ref/ops.hpp"
#include "templates/gemv.cuh"
#include "tests/kernels/test_groups.hpp"
#include "tests/support/gpu_harness.hpp"

namespace kiln::kernel_test {

namespace {

const char* mode_name(GemvOut mode) {
  switch (mode) {
    case GemvOut::store_bf16: return "store_bf16";
    case GemvOut::add_f32: return "add_f32";
    case GemvOut::store_f32: return "store_f32";
  }
  return "?";
}

template <int kN, int kK, GemvOut kOut>
void test_gemv(const std::vector<int>& token_counts, bool time_it) {
  using Out = typename detail::GemvOutType<kOut>::type;
  constexpr bool kBf16Out = kOut == GemvOut::store_bf16;
  using Stored = std::conditional_t<kBf16Out, uint16_t, float>;  // host-side element of the output
  std::mt19937 rng(8000 + kN + kK);
  const size_t weight_elems = static_cast<size_t>(kN) * kK;
  const auto weight = random_bf16(weight_elems, rng, 1.0f);
  const auto weight_f = bf16_to_f32(weight);
  DeviceBuffer<uint16_t> d_weight(weight);
  // Timed calls rotate over copies of the weights larger than L2, so that every call streams from
  // DRAM; one set of copies serves every token count.
  std::optional<RotatingWeights> copies;
  if (time_it) copies.emplace(d_weight);
  for (int tokens : token_counts) {
    const auto in = random_bf16(static_cast<size_t>(tokens) * kK, rng);
    const auto residual = random_f32(static_cast<size_t>(tokens) * kN, rng, 10.0f);
    DeviceBuffer<uint16_t> d_in(in);
    DeviceBuffer<Stored> d_out(static_cast<size_t>(tokens) * kN);
    Out* out = reinterpret_cast<Out*>(d_out.get());
    if constexpr (kOut == GemvOut::add_f32) {
      d_out.upload(residual);
    } else {
      d_out.poison();
    }
    auto run = [&](const __nv_bfloat16* w) {
      kiln::gemv<kN, kK, kOut>(as_bf16(d_in), w, out, tokens, nullptr);
    };
    const std::string shape = "N " + std::to_string(kN) + " K " + std::to_string(kK) + " tokens " +
                              std::to_string(tokens) + " " + mode_name(kOut);
    run(as_bf16(d_weight));
    expect_clean_launch("gemv " + shape);

    std::vector<float> ref(static_cast<size_t>(tokens) * kN);
    if constexpr (kOut == GemvOut::add_f32) ref = residual;
    ref::linear(bf16_to_f32(in).data(), tokens, weight_f.data(), kN, kK, ref.data(), kOut == GemvOut::add_f32);
    std::vector<float> got;
    if constexpr (kBf16Out) {
      got = bf16_to_f32(d_out.download());
    } else {
      got = d_out.download();
    }
    const auto c = compare(ref, got);
    expect_close("gemv " + shape, c, kBf16Out ? 5e-4 : 1e-5);

    if (copies) {
      if constexpr (kOut == GemvOut::add_f32) d_out.upload(residual);
      const double us = median_us([&](int i) { run(copies->at(i)); });
      const double bytes = weight_elems * 2.0 + tokens * kK * 2.0 + tokens * kN * (kBf16Out ? 2.0 : 4.0);
      report("gemv", shape, c.nmse, us, bytes, 0);
    }
  }
  // Zero tokens launch nothing.
  DeviceBuffer<Stored> d_none(1);
  kiln::gemv<kN, kK, kOut>(as_bf16(d_weight), as_bf16(d_weight), reinterpret_cast<Out*>(d_none.get()), 0, nullptr);
  expect_clean_launch("gemv with 0 tokens");
}

}  // namespace

void run_gemv_tests() {
  const std::vector<int> real = {1, 4, 16, 64};
  const std::vector<int> odd = {1, 3, 8, 9, 13, 31, 33, 64, 100, 130};
  // Llama-3.2-1B: qkv, o_proj, gate_up, down_proj, lm_head.
  test_gemv<3072, 2048, GemvOut::store_bf16>(real, true);
  test_gemv<2048, 2048, GemvOut::add_f32>({1, 4, 16, 64, 100}, true);
  test_gemv<16384, 2048, GemvOut::store_bf16>(real, true);
  test_gemv<2048, 8192, GemvOut::add_f32>(real, true);
  test_gemv<128256, 2048, GemvOut::store_f32>({1, 16, 64}, true);
  // SmolLM2-135M.
  test_gemv<960, 576, GemvOut::store_bf16>(real, true);
  test_gemv<576, 576, GemvOut::add_f32>(real, true);
  test_gemv<3072, 576, GemvOut::store_bf16>(real, true);
  test_gemv<576, 1536, GemvOut::add_f32>(real, true);
  test_gemv<49152, 576, GemvOut::store_f32>({1, 16, 64}, true);
  // Qwen3-0.6B.
  test_gemv<4096, 1024, GemvOut::store_bf16>(real, true);
  test_gemv<1024, 2048, GemvOut::add_f32>(real, true);
  test_gemv<1024, 3072, GemvOut::add_f32>(real, true);
  test_gemv<151936, 1024, GemvOut::store_f32>({1, 16}, true);
  // Odd shapes: N not a multiple of 16, K not a multiple of 32, 8 (4-element loads), 4, 2.
  test_gemv<200, 144, GemvOut::store_bf16>(odd, false);
  test_gemv<1000, 200, GemvOut::add_f32>(odd, false);
  test_gemv<33, 100, GemvOut::store_f32>(odd, false);
  test_gemv<17, 30, GemvOut::store_bf16>(odd, false);
  test_gemv<5, 7, GemvOut::store_f32>(odd, false);
  test_gemv<640, 144, GemvOut::add_f32>(odd, false);  // tiny-smollm2
}

}  // namespace kiln::kernel_test
