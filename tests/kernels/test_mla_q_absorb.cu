// mla_q_absorb (templates/mla_q_absorb.cuh) against ref::mla_q_absorb: each head's q_nope folded
// into the latent space by W_UKᵀ, q_rope copied alongside; the tile GEMM at every token count, a
// CUDA-core kernel for rows that are not 16-byte aligned.
#include "runtime/ref/mla.hpp"
#include "templates/mla_q_absorb.cuh"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {
namespace {

template <shape::mla_q_absorb S>
void check_q_absorb(const std::vector<int>& token_counts) {
  constexpr int kIn = S.nope + S.rope, kOut = S.latent + S.rope;
  std::mt19937 rng(22000 + S.heads * S.latent + S.nope);
  const auto w_uk = random_bf16(static_cast<size_t>(S.heads) * S.nope * S.latent, rng, 0.1f);
  DeviceBuffer<uint16_t> d_w(w_uk);
  for (int tokens : token_counts) {
    const auto q = random_bf16(static_cast<size_t>(tokens) * S.heads * kIn, rng);
    DeviceBuffer<uint16_t> d_q(q), d_out(static_cast<size_t>(tokens) * S.heads * kOut);
    d_out.poison();
    kiln::mla_q_absorb<S>(as_bf16(d_q), as_bf16(d_w), as_bf16_mut(d_out), tokens, nullptr);
    const std::string what = "mla_q_absorb heads " + std::to_string(S.heads) + " nope " + std::to_string(S.nope) +
                             " rope " + std::to_string(S.rope) + " latent " + std::to_string(S.latent) + " tokens " +
                             std::to_string(tokens);
    check_launch(what);
    std::vector<float> ref(static_cast<size_t>(tokens) * S.heads * kOut);
    ref::mla_q_absorb(S, bf16_to_f32(q).data(), bf16_to_f32(w_uk).data(), ref.data(), tokens);
    check_close(what, ref, bf16_to_f32(d_out.download()), kBf16Limit);
  }
  kiln::mla_q_absorb<S>(nullptr, as_bf16(d_w), nullptr, 0, nullptr);
  check_launch("mla_q_absorb, 0 tokens");
}

}  // namespace

TEST_CASE("mla_q_absorb folds q_nope into the latent space", "[mla_q_absorb]") {
  check_q_absorb<dsv2lite::kMlaQAbsorb>({1, 4, 17, 64, 65, 300, 2048});
  check_q_absorb<shape::mla_q_absorb{.heads = 128, .nope = 128, .rope = 64, .latent = 512}>({1, 64, 300});  // DeepSeek-V2
  check_q_absorb<tiny_ds::kMlaQAbsorb>({1, 3, 9, 64, 65, 130});
  check_q_absorb<tiny_ds_lite::kMlaQAbsorb>({1, 3, 9, 64, 65, 130});  // nope 8, rope 6: CUDA cores
}

}  // namespace kiln::kernel_test
