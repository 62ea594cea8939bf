// mla_prep (templates/mla_prep.cuh), MLA's fused prep, against the four GPU ops it replaces run one
// after another (rmsnorm_inplace of c_kv, rope of q, rope of k_rope, mla_kv_write), bit for bit:
// q rotated in place, every token's cache row, nothing written for a padding token (slot -1) and
// every other cache row untouched.

#include "runtime/model/rope_table.hpp"
#include "templates/mla_kv_write.cuh"
#include "templates/mla_prep.cuh"
#include "templates/rmsnorm_inplace.cuh"
#include "templates/rope.cuh"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {
namespace {

template <shape::mla_prep P, shape::rmsnorm_inplace N, shape::rope RQ, shape::rope RK, shape::mla_kv_write W>
void check_mla_prep(int tokens) {
  static_assert(N.dim == P.latent && W.latent == P.latent && W.rope == P.rope && RQ.heads == P.heads &&
                RQ.offset == P.nope && RK.offset == P.latent && W.page_size == P.page_size);
  constexpr int kWidth = P.latent + P.rope, kQRow = P.heads * (P.nope + P.rope);
  std::mt19937 rng(36000 + kWidth + tokens);
  const int num_pages = tokens / P.page_size + 3;
  const auto q = random_bf16(static_cast<size_t>(tokens) * kQRow, rng, 2.0f);
  const auto kv_a = random_bf16(static_cast<size_t>(tokens) * kWidth, rng, 2.0f);
  const auto norm = random_bf16(P.latent, rng);
  const auto cache = random_bf16(static_cast<size_t>(num_pages) * P.page_size * kWidth, rng);
  const auto [positions, slots] = random_prep_steps(tokens, num_pages * P.page_size, rng);
  const auto table = build_rope_table(RopeInfo{.theta = 1e4, .rotary_dim = P.rope}, 4096);
  DeviceBuffer<int> d_pos(positions), d_slots(slots);
  DeviceBuffer<float> d_table(table);
  DeviceBuffer<uint16_t> d_norm(norm);

  // The four ops.
  DeviceBuffer<uint16_t> q_parts(q), kv_parts(kv_a), cache_parts(cache);
  kiln::rmsnorm_inplace<N>(as_bf16_mut(kv_parts), as_bf16(d_norm), tokens, nullptr);
  kiln::rope<RQ>(as_bf16_mut(q_parts), d_pos.get(), d_table.get(), tokens, nullptr);
  kiln::rope<RK>(as_bf16_mut(kv_parts), d_pos.get(), d_table.get(), tokens, nullptr);
  kiln::mla_kv_write<W>(as_bf16(kv_parts), d_slots.get(), as_bf16_mut(cache_parts), tokens, nullptr);
  // The fused op.
  DeviceBuffer<uint16_t> q_fused(q), kv_fused(kv_a), cache_fused(cache);
  kiln::mla_prep<P>(as_bf16_mut(q_fused), as_bf16(kv_fused), as_bf16(d_norm), d_pos.get(), d_table.get(), d_slots.get(),
                    as_bf16_mut(cache_fused), tokens, nullptr);
  const std::string what = "mla_prep heads " + std::to_string(P.heads) + " latent " + std::to_string(P.latent) +
                           " rope " + std::to_string(P.rope) + " tokens " + std::to_string(tokens);
  check_launch(what);
  check_same_bits(what + ": q", "rope", q_parts.download(), q_fused.download());
  check_same_bits(what + ": the latent cache", "rmsnorm_inplace + rope + mla_kv_write", cache_parts.download(),
                  cache_fused.download());
  CHECK(kv_fused.download() == kv_a);  // read only
  kiln::mla_prep<P>(as_bf16_mut(q_fused), as_bf16(kv_fused), as_bf16(d_norm), d_pos.get(), d_table.get(), d_slots.get(),
                    as_bf16_mut(cache_fused), 0, nullptr);
  check_launch(what + ", 0 tokens");
}

}  // namespace

TEST_CASE("mla_prep gives the bits of the four ops it fuses", "[mla_prep]") {
  for (const int tokens : {1, 7, 300}) {
    check_mla_prep<dsv2lite::kMlaPrep, dsv2lite::kRmsnormKvLatent, dsv2lite::kRopeQ, dsv2lite::kRopeK,
                   dsv2lite::kMlaKvWrite>(tokens);
    check_mla_prep<tiny_ds::kMlaPrep, tiny_ds::kRmsnormKvLatent, tiny_ds::kRopeQ, tiny_ds::kRopeK, tiny_ds::kMlaKvWrite>(
        tokens);
    check_mla_prep<tiny_ds_lite::kMlaPrep, tiny_ds_lite::kRmsnormKvLatent, tiny_ds_lite::kRopeQ, tiny_ds_lite::kRopeK,
                   tiny_ds_lite::kMlaKvWrite>(tokens);
  }
}

}  // namespace kiln::kernel_test
