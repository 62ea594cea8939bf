// mla_v_up (templates/mla_v_up.cuh) against ref::mla_v_up: each head's latent output lifted by
// W_UV; streaming at decode (heads of whole 16-row tiles), the tile GEMM above (and at every T in
// mla_v_up_prefill), CUDA cores for rows that are not 16-byte aligned.
#include "runtime/ref/mla.hpp"
#include "templates/mla_v_up.cuh"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {
namespace {

template <shape::mla_v_up S>
void check_v_up(const std::vector<int>& token_counts) {
  std::mt19937 rng(23000 + S.heads * S.latent + S.v);
  const auto w_uv = random_bf16(static_cast<size_t>(S.heads) * S.v * S.latent, rng, 0.1f);
  DeviceBuffer<uint16_t> d_w(w_uv);
  for (int tokens : token_counts) {
    const auto o_lat = random_bf16(static_cast<size_t>(tokens) * S.heads * S.latent, rng);
    DeviceBuffer<uint16_t> d_o(o_lat), d_out(static_cast<size_t>(tokens) * S.heads * S.v);
    std::vector<float> ref(static_cast<size_t>(tokens) * S.heads * S.v);
    ref::mla_v_up(S, bf16_to_f32(o_lat).data(), bf16_to_f32(w_uv).data(), ref.data(), tokens);
    for (const bool prefill : {false, true}) {
      d_out.poison();
      (prefill ? kiln::mla_v_up_prefill<S> : kiln::mla_v_up<S>)(as_bf16(d_o), as_bf16(d_w), as_bf16_mut(d_out), tokens,
                                                               nullptr);
      const std::string what = std::string(prefill ? "mla_v_up_prefill" : "mla_v_up") + " heads " +
                               std::to_string(S.heads) + " latent " + std::to_string(S.latent) + " v " +
                               std::to_string(S.v) + " tokens " + std::to_string(tokens);
      check_launch(what);
      check_close(what, ref, bf16_to_f32(d_out.download()), kBf16Limit);
    }
  }
  kiln::mla_v_up<S>(nullptr, as_bf16(d_w), nullptr, 0, nullptr);
  kiln::mla_v_up_prefill<S>(nullptr, as_bf16(d_w), nullptr, 0, nullptr);
  check_launch("mla_v_up, 0 tokens");
}

}  // namespace

TEST_CASE("mla_v_up lifts each head's latent output", "[mla_v_up]") {
  check_v_up<dsv2lite::kMlaVUp>({1, 4, 17, 64, 65, 300, 2048});
  check_v_up<shape::mla_v_up{.heads = 128, .latent = 512, .v = 128}>({1, 64, 300});  // DeepSeek-V2
  check_v_up<tiny_ds::kMlaVUp>({1, 3, 9, 64, 65, 130});
  check_v_up<tiny_ds_lite::kMlaVUp>({1, 3, 9, 64, 65, 130});
  check_v_up<shape::mla_v_up{.heads = 5, .latent = 20, .v = 16}>({1, 9, 64, 65});  // streaming, 4-element rows
}

}  // namespace kiln::kernel_test
