// rmsnorm_inplace (templates/rmsnorm_inplace.cuh) against ref::rmsnorm_inplace: the first dim values
// of each row normalized in place (MLA's q latent, and c_kv inside c_kv | k_rope); the rest of a row
// stays as it was.
#include "runtime/ref/ops.hpp"
#include "templates/rmsnorm_inplace.cuh"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {
namespace {

template <shape::rmsnorm_inplace S>
void check_rmsnorm_inplace(const std::vector<int>& token_counts) {
  std::mt19937 rng(20000 + S.dim * 7 + S.row);
  const auto weight = random_bf16(S.dim, rng);
  DeviceBuffer<uint16_t> d_weight(weight);
  for (int tokens : token_counts) {
    const auto rows = random_bf16(static_cast<size_t>(tokens) * S.row, rng, 2.0f);
    DeviceBuffer<uint16_t> d_rows(rows);
    kiln::rmsnorm_inplace<S>(as_bf16_mut(d_rows), as_bf16(d_weight), tokens, nullptr);
    const std::string what = "rmsnorm_inplace dim " + std::to_string(S.dim) + " row " + std::to_string(S.row) +
                             " tokens " + std::to_string(tokens);
    check_launch(what);
    auto ref = bf16_to_f32(rows);
    ref::rmsnorm_inplace(S, ref.data(), bf16_to_f32(weight).data(), tokens);
    const auto got = d_rows.download();
    check_close(what, ref, bf16_to_f32(got), kBf16Limit);
    std::vector<bool> changes(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) changes[i] = static_cast<int>(i % S.row) < S.dim;
    check_untouched(what, rows, got, changes);
  }
  kiln::rmsnorm_inplace<S>(nullptr, as_bf16(d_weight), 0, nullptr);
  check_launch("rmsnorm_inplace, 0 tokens");
}

}  // namespace

TEST_CASE("rmsnorm_inplace normalizes a prefix of each row and leaves the rest", "[rmsnorm_inplace]") {
  const std::vector<int> odd = {1, 3, 9, 64, 65, 130};
  check_rmsnorm_inplace<dsv2lite::kRmsnormKvLatent>({1, 64, 2048});  // c_kv 512 of 576
  check_rmsnorm_inplace<shape::rmsnorm_inplace{.dim = 1536, .row = 1536, .eps = 1e-6f}>({1, 64});  // DeepSeek-V2 q_a
  check_rmsnorm_inplace<tiny_ds::kRmsnormKvLatent>(odd);
  check_rmsnorm_inplace<tiny_ds::kRmsnormQLatent>(odd);
  check_rmsnorm_inplace<tiny_ds_lite::kRmsnormKvLatent>(odd);  // 24 of 30: 4-byte vectors
}

}  // namespace kiln::kernel_test
