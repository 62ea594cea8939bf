// rmsnorm (templates/rmsnorm.cuh) against ref::rmsnorm: every row of the fp32 residual stream; and
// at decode, adding the split sums the residual projection before it left (PendingSums).
#include <cstring>

#include "runtime/ref/ops.hpp"
#include "templates/linear.cuh"
#include "templates/rmsnorm.cuh"
#include "tests/kernels/fp8_inputs.hpp"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {
namespace {

template <shape::rmsnorm S>
void check_rmsnorm(int rows) {
  std::mt19937 rng(2000 + S.dim + rows);
  const auto x = random_f32(static_cast<size_t>(rows) * S.dim, rng, 3.0f);
  const auto weight = random_bf16(S.dim, rng);
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<uint16_t> d_w(weight), d_out(static_cast<size_t>(rows) * S.dim);
  d_out.poison();
  kiln::rmsnorm<S>(d_x.get(), as_bf16(d_w), as_bf16_mut(d_out), rows, nullptr);
  const std::string what = "rmsnorm dim " + std::to_string(S.dim) + " rows " + std::to_string(rows);
  check_launch(what);
  std::vector<float> ref(static_cast<size_t>(rows) * S.dim);
  ref::rmsnorm(S, x.data(), bf16_to_f32(weight).data(), ref.data(), rows);
  check_close(what, ref, bf16_to_f32(d_out.download()), kBf16Limit);
  kiln::rmsnorm<S>(d_x.get(), as_bf16(d_w), as_bf16_mut(d_out), 0, nullptr);
  check_launch(what + ", 0 rows");
}

// The prefill's rmsnorm with FP8 inputs for the projection after it (templates/fp8_rows.hpp).
template <shape::rmsnorm S>
void check_rmsnorm_fp8(int rows) {
  std::mt19937 rng(2100 + S.dim + rows);
  const auto x = random_f32(static_cast<size_t>(rows) * S.dim, rng, 3.0f);
  const auto weight = random_bf16(S.dim, rng);
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<uint16_t> d_w(weight), d_out(static_cast<size_t>(rows) * S.dim);
  check_fp8_output(
      "rmsnorm to FP8, dim " + std::to_string(S.dim) + " rows " + std::to_string(rows), rows, S.dim, d_out,
      [&] { kiln::rmsnorm<S>(d_x.get(), as_bf16(d_w), as_bf16_mut(d_out), rows, nullptr); },
      [&](Fp8Rows fp8) { kiln::rmsnorm<S>(d_x.get(), as_bf16(d_w), as_bf16_mut(d_out), fp8, rows, nullptr); });
}

// A residual projection's split sums left to the RMSNorm after it (templates/pending_sums.hpp):
// linear<S>(..., &pending) then rmsnorm<N>(..., &pending) must give the residual and the norm's rows
// the bits of linear<S> then rmsnorm<N>, at every token count a decode pass has, for the projections
// the generated decode pairs with a norm (o_proj and down_proj: Llama-3.2-1B's, Qwen3-0.6B's and
// SmolLM2-135M's). Where the projection's path sums its splits through scratch (the shapes with
// fewer row tiles than SMs, 9+ tokens: the 1B's and the 0.6B's, on a GPU that holds the batched
// GEMV's stages) the sums must really be left, so that the fused kernel runs; at 8 tokens and fewer
// nothing is left and the norm is the plain one.
template <shape::linear S, shape::rmsnorm N>
void check_pending_sums(bool left_from_9) {
  static_assert(S.out == LinearOut::add_f32 && S.n == N.dim, "a residual projection and the norm of its rows");
  constexpr int kMaxTokens = 64;
  std::mt19937 rng(7000 + S.n + S.k);
  DeviceBuffer<uint16_t> weight(random_bf16(static_cast<size_t>(S.n) * S.k, rng, 0.05f));
  DeviceBuffer<uint16_t> in(random_bf16(static_cast<size_t>(kMaxTokens) * S.k, rng));
  DeviceBuffer<uint16_t> norm_weight(random_bf16(S.n, rng));
  const std::vector<float> start = random_f32(static_cast<size_t>(kMaxTokens) * S.n, rng, 3.0f);
  DeviceBuffer<float> scratch(std::max<long long>(1, linear_scratch_floats<S>(kMaxTokens)));
  for (const int tokens : {1, 5, 8, 9, 16, 24, 33, 64}) {
    const size_t count = static_cast<size_t>(tokens) * S.n;
    const std::vector<float> x0(start.begin(), start.begin() + count);
    DeviceBuffer<float> x_plain(x0), x_left(x0);
    DeviceBuffer<uint16_t> h_plain(count), h_left(count);
    h_plain.poison();
    h_left.poison();
    scratch.poison();
    kiln::linear<S>(as_bf16(in), as_bf16(weight), x_plain.get(), tokens, scratch.get(), nullptr);
    kiln::rmsnorm<N>(x_plain.get(), as_bf16(norm_weight), as_bf16_mut(h_plain), tokens, nullptr);
    const std::string what = "linear " + std::to_string(S.n) + "x" + std::to_string(S.k) + " then rmsnorm, " +
                             std::to_string(tokens) + " tokens";
    check_launch(what);

    scratch.poison();
    PendingSums pending{nullptr, nullptr, 7, 7, 7};  // not empty: linear must set it
    pending.partials = scratch.get();
    kiln::linear<S>(as_bf16(in), as_bf16(weight), x_left.get(), tokens, scratch.get(), &pending, nullptr);
    const bool left = static_cast<bool>(pending);
    kiln::rmsnorm<N>(x_left.get(), as_bf16(norm_weight), as_bf16_mut(h_left), tokens, &pending, nullptr);
    check_launch(what + ", the sums left to the norm");
    INFO(what << ": sums left " << left);
    if (tokens <= 8 || left_from_9) CHECK(left == (tokens >= 9));
    CHECK_FALSE(static_cast<bool>(pending));  // the norm took them
    const auto xp = x_plain.download(), xl = x_left.download();
    const auto hp = h_plain.download(), hl = h_left.download();
    CHECK(std::memcmp(xp.data(), xl.data(), xp.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(hp.data(), hl.data(), hp.size() * sizeof(uint16_t)) == 0);
  }
}

}  // namespace

TEST_CASE("rmsnorm writes FP8 inputs in place of its rows", "[rmsnorm]") {
  check_rmsnorm_fp8<llama1b::kRmsnorm2048>(1);     // three zero rows of padding
  check_rmsnorm_fp8<llama1b::kRmsnorm2048>(2048);
  check_rmsnorm_fp8<qwen06::kRmsnorm1024>(7);
  check_rmsnorm_fp8<shape::rmsnorm{.dim = 8192, .eps = 1e-5f}>(6);  // a 128-column block a warp in each of 8 steps
}

TEST_CASE("rmsnorm normalizes every row", "[rmsnorm]") {
  check_rmsnorm<llama1b::kRmsnorm2048>(1);
  check_rmsnorm<llama1b::kRmsnorm2048>(2048);
  check_rmsnorm<qwen06::kRmsnorm1024>(64);
  check_rmsnorm<smollm2::kRmsnorm576>(7);
  check_rmsnorm<shape::rmsnorm{.dim = 200, .eps = 1e-5f}>(300);   // 2-float vectors
  check_rmsnorm<shape::rmsnorm{.dim = 999, .eps = 1e-6f}>(5);     // scalar loads, a partial warp
  check_rmsnorm<shape::rmsnorm{.dim = 8192, .eps = 1e-5f}>(4);    // more than one value per thread
}

TEST_CASE("a residual projection's split sums added by the RMSNorm after it keep their bits", "[linear][rmsnorm]") {
  check_pending_sums<llama1b::kLinearOProj, llama1b::kRmsnorm2048>(true);
  check_pending_sums<llama1b::kLinearDownProj, llama1b::kRmsnorm2048>(true);
  check_pending_sums<qwen06::kLinearOProj, qwen06::kRmsnorm1024>(true);
  check_pending_sums<qwen06::kLinearDownProj, qwen06::kRmsnorm1024>(true);
  check_pending_sums<smollm2::kLinearOProj, smollm2::kRmsnorm576>(false);  // whichever path it takes
  check_pending_sums<smollm2::kLinearDownProj, smollm2::kRmsnorm576>(false);
}

}  // namespace kiln::kernel_test
