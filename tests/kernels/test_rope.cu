// rope (templates/rope.cuh) against ref::rope: the rotated pairs of each head in place, every other
// value of the row untouched. The dense models rotate q and k inside attention_prep
// (test_attention_prep.cu); DeepSeek-V2 runs rope on its own, interleaved, at an offset.
#include "runtime/model/rope_table.hpp"
#include "runtime/ref/ops.hpp"
#include "templates/rope.cuh"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {
namespace {

template <shape::rope S>
void check_rope(int tokens, int max_position) {
  std::mt19937 rng(5000 + S.rotary_dim + tokens + S.offset);
  const auto rows = random_bf16(static_cast<size_t>(tokens) * S.row, rng);
  std::vector<int> positions(tokens);
  std::uniform_int_distribution<int> pick(0, max_position - 1);
  for (auto& p : positions) p = pick(rng);
  const auto table = build_rope_table(RopeInfo{.theta = 10000.0, .rotary_dim = S.rotary_dim}, max_position);
  DeviceBuffer<uint16_t> d_rows(rows);
  DeviceBuffer<int> d_pos(positions);
  DeviceBuffer<float> d_table(table);
  kiln::rope<S>(as_bf16_mut(d_rows), d_pos.get(), d_table.get(), tokens, nullptr);
  const std::string what = "rope heads " + std::to_string(S.heads) + " stride " + std::to_string(S.head_stride) +
                           " rotary " + std::to_string(S.rotary_dim) + " row " + std::to_string(S.row) + " offset " +
                           std::to_string(S.offset) + (S.interleaved ? " interleaved" : "") + " tokens " +
                           std::to_string(tokens);
  check_launch(what);
  auto ref = bf16_to_f32(rows);
  ref::rope(S, ref.data(), positions.data(), table.data(), tokens);
  const auto got = d_rows.download();
  check_close(what, ref, bf16_to_f32(got), kBf16Limit);
  std::vector<bool> changes(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const int col = static_cast<int>(i % S.row) - S.offset;
    changes[i] = col >= 0 && col / S.head_stride < S.heads && col % S.head_stride < S.rotary_dim;
  }
  check_untouched(what, rows, got, changes);
}

}  // namespace

TEST_CASE("rope rotates the pairs of each head and nothing else", "[rope]") {
  check_rope<dsv2lite::kRopeQ>(1, 8192);    // q_rope after each head's 128 nope values
  check_rope<dsv2lite::kRopeQ>(300, 8192);
  check_rope<dsv2lite::kRopeK>(64, 8192);   // the shared k_rope after c_kv
  check_rope<tiny_ds::kRopeQ>(37, 512);
  check_rope<llama1b::kRopeQk>(16, 8192);   // the dense layout (pairs (i, i + 32)) the fused op replaces
  check_rope<shape::rope{.heads = 3, .head_stride = 24, .rotary_dim = 16, .row = 100, .offset = 7,
                         .interleaved = false}>(9, 50);  // an odd offset and row: unaligned pairs
}

}  // namespace kiln::kernel_test
