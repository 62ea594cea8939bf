// mla_kv_write (templates/mla_kv_write.cuh): each token's latent row copied exactly into its cache
// slot; a padding token (slot -1) writes nothing; every other row of the cache keeps its bits.
#include <numeric>

#include "runtime/ref/mla.hpp"
#include "templates/mla_kv_write.cuh"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {
namespace {

template <shape::mla_kv_write S>
void check_mla_kv_write(int tokens) {
  constexpr int kWidth = S.latent + S.rope;
  std::mt19937 rng(21000 + kWidth + tokens);
  const int num_pages = (tokens + S.page_size - 1) / S.page_size + 3;
  const auto cache = random_bf16(static_cast<size_t>(num_pages) * S.page_size * kWidth, rng);
  const auto kv_a = random_bf16(static_cast<size_t>(tokens) * kWidth, rng);
  std::vector<int> slots(static_cast<size_t>(num_pages) * S.page_size);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(tokens);
  if (tokens > 1) slots.back() = -1;  // a padding token

  DeviceBuffer<uint16_t> d_cache(cache), d_kv(kv_a);
  DeviceBuffer<int> d_slots(slots);
  kiln::mla_kv_write<S>(as_bf16(d_kv), d_slots.get(), as_bf16_mut(d_cache), tokens, nullptr);
  const std::string what = "mla_kv_write width " + std::to_string(kWidth) + " tokens " + std::to_string(tokens);
  check_launch(what);
  // The reference on the same cache (fp32 of its bf16 values; the padding token skipped).
  auto ref = bf16_to_f32(cache);
  for (int t = 0; t < tokens; ++t) {
    if (slots[t] >= 0) {
      ref::mla_kv_write(S, bf16_to_f32(kv_a).data() + static_cast<size_t>(t) * kWidth, &slots[t],
                        ref::LatentPages{ref.data(), {kWidth}, S.page_size}, 1);
    }
  }
  check_close(what, ref, bf16_to_f32(d_cache.download()), kExact);
  kiln::mla_kv_write<S>(as_bf16(d_kv), d_slots.get(), as_bf16_mut(d_cache), 0, nullptr);
  check_launch(what + ", 0 tokens");
}

}  // namespace

TEST_CASE("mla_kv_write copies each latent row into its slot", "[mla_kv_write]") {
  check_mla_kv_write<dsv2lite::kMlaKvWrite>(1);
  check_mla_kv_write<dsv2lite::kMlaKvWrite>(300);
  check_mla_kv_write<tiny_ds::kMlaKvWrite>(37);
  check_mla_kv_write<tiny_ds_lite::kMlaKvWrite>(37);  // 24 + 6: 4-byte vectors, page 5
}

}  // namespace kiln::kernel_test
