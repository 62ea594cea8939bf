// rmsnorm_rows (templates/rmsnorm_rows.cuh) against ref::rmsnorm_rows: only the listed rows (the
// rows that need logits), in list order, repeats allowed.
#include "runtime/ref/ops.hpp"
#include "templates/rmsnorm_rows.cuh"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {
namespace {

template <shape::rmsnorm_rows S>
void check_rmsnorm_rows(int rows, std::vector<int> selected) {
  std::mt19937 rng(3000 + S.dim + rows);
  const auto x = random_f32(static_cast<size_t>(rows) * S.dim, rng, 2.0f);
  const auto weight = random_bf16(S.dim, rng);
  const int n = static_cast<int>(selected.size());
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<int> d_rows(selected);
  DeviceBuffer<uint16_t> d_w(weight), d_out(static_cast<size_t>(n) * S.dim);
  d_out.poison();
  kiln::rmsnorm_rows<S>(d_x.get(), d_rows.get(), as_bf16(d_w), as_bf16_mut(d_out), n, nullptr);
  const std::string what = "rmsnorm_rows dim " + std::to_string(S.dim) + " of " + std::to_string(n) + " rows";
  check_launch(what);
  std::vector<float> ref(static_cast<size_t>(n) * S.dim);
  ref::rmsnorm_rows(S, x.data(), selected.data(), bf16_to_f32(weight).data(), ref.data(), n);
  check_close(what, ref, bf16_to_f32(d_out.download()), kBf16Limit);
}

}  // namespace

TEST_CASE("rmsnorm_rows normalizes the listed rows only", "[rmsnorm_rows]") {
  check_rmsnorm_rows<llama1b::kRmsnormRows2048>(300, {299, 0, 17, 17, 150});
  check_rmsnorm_rows<smollm2::kRmsnormRows576>(64, {3});
  check_rmsnorm_rows<shape::rmsnorm_rows{.dim = 144, .eps = 1e-6f}>(10, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0});  // reversed
}

}  // namespace kiln::kernel_test
