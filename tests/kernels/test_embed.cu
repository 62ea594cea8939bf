// embed (templates/embed.cuh) against ref::embed: an exact copy of table rows into fp32.
#include "runtime/ref/ops.hpp"
#include "templates/embed.cuh"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {
namespace {

// `rank` > 0: the table is that tensor-parallel rank's rows of a vocabulary of (ranks) × S.vocab;
// token ids are drawn from the whole vocabulary, so most are other ranks' (zero rows).
template <shape::embed S>
void check_embed(int tokens, int rank = 0, int ranks = 1) {
  std::mt19937 rng(1000 + S.dim + tokens);
  const auto table = random_bf16(static_cast<size_t>(S.vocab) * S.dim, rng);
  std::vector<int> ids(tokens);
  std::uniform_int_distribution<int> pick(0, S.vocab * ranks - 1);
  for (auto& id : ids) id = pick(rng);
  DeviceBuffer<uint16_t> d_table(table);
  DeviceBuffer<int> d_ids(ids);
  DeviceBuffer<float> d_x(static_cast<size_t>(tokens) * S.dim);
  d_x.poison();
  kiln::embed<S>(d_ids.get(), as_bf16(d_table), d_x.get(), rank, tokens, nullptr);
  const std::string what = "embed dim " + std::to_string(S.dim) + " tokens " + std::to_string(tokens) + " rank " +
                           std::to_string(rank) + " of " + std::to_string(ranks);
  check_launch(what);
  std::vector<float> ref(static_cast<size_t>(tokens) * S.dim);
  ref.assign(ref.size(), std::nanf(""));  // poisoned: every row must be written, zeros included
  ref::embed(S, ids.data(), bf16_to_f32(table).data(), ref.data(), rank, tokens);
  check_close(what, ref, d_x.download(), kExact);
  kiln::embed<S>(d_ids.get(), as_bf16(d_table), d_x.get(), rank, 0, nullptr);
  check_launch(what + ", 0 tokens");
}

}  // namespace

TEST_CASE("embed copies table rows into the fp32 residual stream", "[embed]") {
  check_embed<llama1b::kEmbedTokens>(1);
  check_embed<llama1b::kEmbedTokens>(2048);
  check_embed<smollm2::kEmbedTokens>(37);
  check_embed<shape::embed{.vocab = 1000, .dim = 200}>(300);  // rows of 200: 8-byte vectors
  check_embed<shape::embed{.vocab = 500, .dim = 999}>(9);     // an odd dim: scalar loads
  // Tensor parallelism: the second of two ranks and the last of four (other ranks' tokens: zeros).
  check_embed<shape::embed{.vocab = 64128, .dim = 4096}>(64, 1, 2);
  check_embed<shape::embed{.vocab = 1000, .dim = 200}>(300, 3, 4);
}

}  // namespace kiln::kernel_test
