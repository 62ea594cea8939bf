// attention_prep (templates/attention_prep.cuh), the fused kernel of the dense families, against the
// reference ops it replaces, run one by one as the CPU backend runs them: [ref::head_rmsnorm],
// ref::rope, ref::kv_write, at the shapes of the parts of each model's graph. Checked: q in place,
// every written k and v vector in the cache, nothing written for a padding token (slot -1) or
// outside the tokens' slots.
#include <cmath>

#include "runtime/model/rope_table.hpp"
#include "runtime/ref/ops.hpp"
#include "templates/attention_prep.cuh"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {
namespace {

template <shape::attention_prep P>
void check_attention_prep(const shape::head_rmsnorm* norm, const shape::rope& rope, const shape::kv_write& kv,
                          int tokens) {
  REQUIRE((norm != nullptr) == P.qk_norm);
  std::mt19937 rng(6000 + P.head_dim * 13 + tokens);
  const int num_pages = tokens / P.page_size + 3;
  const auto qkv = random_bf16(static_cast<size_t>(tokens) * P.row, rng, 2.0f);
  const auto q_norm = random_bf16(P.head_dim, rng), k_norm = random_bf16(P.head_dim, rng);
  const auto [positions, slots] = random_prep_steps(tokens, num_pages * P.page_size, rng);
  const auto table = build_rope_table(RopeInfo{.theta = 1e6, .rotary_dim = P.head_dim}, 4096);

  const KvLayout layout{P.kv_heads, P.head_dim, P.page_size};
  const size_t cache_elems = static_cast<size_t>(num_pages) * 2 * P.kv_heads * P.page_size * P.head_dim;
  DeviceBuffer<uint16_t> d_qkv(qkv), d_qn(q_norm), d_kn(k_norm), d_cache(cache_elems);
  DeviceBuffer<int> d_pos(positions), d_slots(slots);
  DeviceBuffer<float> d_table(table);
  d_cache.poison();
  kiln::attention_prep<P>(as_bf16_mut(d_qkv), P.qk_norm ? as_bf16(d_qn) : nullptr, P.qk_norm ? as_bf16(d_kn) : nullptr,
                          d_pos.get(), d_table.get(), d_slots.get(), as_bf16_mut(d_cache), tokens, nullptr);
  const std::string what = "attention_prep heads " + std::to_string(P.heads) + "/" + std::to_string(P.kv_heads) + "x" +
                           std::to_string(P.head_dim) + " page " + std::to_string(P.page_size) +
                           (P.qk_norm ? " qk_norm" : "") + " tokens " + std::to_string(tokens);
  check_launch(what);

  // The reference: the parts one by one, on fp32 copies (the padding token's slot skipped).
  auto ref_rows = bf16_to_f32(qkv);
  if (norm) ref::head_rmsnorm(*norm, ref_rows.data(), bf16_to_f32(q_norm).data(), bf16_to_f32(k_norm).data(), tokens);
  ref::rope(rope, ref_rows.data(), positions.data(), table.data(), tokens);
  std::vector<float> ref_cache(cache_elems, NAN);
  for (int t = 0; t < tokens; ++t) {
    if (slots[t] >= 0) {
      ref::kv_write(kv, ref_rows.data() + static_cast<size_t>(t) * P.row, &slots[t], ref::KvPages{ref_cache.data(), layout},
                    1);
    }
  }

  const auto got_rows = bf16_to_f32(d_qkv.download());
  const auto got_cache = bf16_to_f32(d_cache.download());
  std::vector<float> ref_q, got_q, ref_kv, got_kv;
  for (int t = 0; t < tokens; ++t) {
    const size_t row = static_cast<size_t>(t) * P.row;
    ref_q.insert(ref_q.end(), ref_rows.begin() + row, ref_rows.begin() + row + P.heads * P.head_dim);
    got_q.insert(got_q.end(), got_rows.begin() + row, got_rows.begin() + row + P.heads * P.head_dim);
    if (slots[t] < 0) continue;
    for (int side = 0; side < 2; ++side) {
      for (int h = 0; h < P.kv_heads; ++h) {
        const long long at = layout.vec_at_slot(slots[t], side, h);
        ref_kv.insert(ref_kv.end(), ref_cache.begin() + at, ref_cache.begin() + at + P.head_dim);
        got_kv.insert(got_kv.end(), got_cache.begin() + at, got_cache.begin() + at + P.head_dim);
      }
    }
  }
  check_close(what + ": q", ref_q, got_q, kBf16Limit);
  check_close(what + ": k and v in the cache", ref_kv, got_kv, kBf16Limit);
  long long written = 0;
  for (float v : got_cache) written += !std::isnan(v);
  INFO(what << ": cache elements written " << written << ", expected " << got_kv.size());
  CHECK(written == static_cast<long long>(got_kv.size()));
  kiln::attention_prep<P>(as_bf16_mut(d_qkv), as_bf16(d_qn), as_bf16(d_kn), d_pos.get(), d_table.get(), d_slots.get(),
                          as_bf16_mut(d_cache), 0, nullptr);
  check_launch(what + ", 0 tokens");
}

}  // namespace

TEST_CASE("attention_prep equals its parts: per-head norm, RoPE, KV write", "[attention_prep]") {
  for (int tokens : {1, 37, 2048}) {
    check_attention_prep<qwen06::kAttentionPrep>(&qwen06::kHeadRmsnorm, qwen06::kRopeQk, qwen06::kKvWrite, tokens);
    check_attention_prep<llama1b::kAttentionPrep>(nullptr, llama1b::kRopeQk, llama1b::kKvWrite, tokens);
  }
  check_attention_prep<smollm2::kAttentionPrep>(nullptr, smollm2::kRopeQk, smollm2::kKvWrite, 64);
  check_attention_prep<tiny_qwen3::kAttentionPrep>(&tiny_qwen3::kHeadRmsnorm, tiny_qwen3::kRopeQk,
                                                   tiny_qwen3::kKvWrite, 33);  // pages of 5 tokens
  // Head dim 40 in a 201-wide row (one element of padding): 2-byte vectors, a partial lane group.
  constexpr shape::attention_prep kOdd{.heads = 3, .kv_heads = 1, .head_dim = 40, .row = 201, .page_size = 5,
                                       .qk_norm = true, .eps = 1e-6f};
  const shape::head_rmsnorm norm{.heads = 3, .kv_heads = 1, .head_dim = 40, .row = 201, .eps = 1e-6f};
  const shape::rope rope{.heads = 4, .head_stride = 40, .rotary_dim = 40, .row = 201, .offset = 0, .interleaved = false};
  const shape::kv_write kv{.kv_heads = 1, .head_dim = 40, .page_size = 5, .row = 201, .k_offset = 120, .v_offset = 160};
  check_attention_prep<kOdd>(&norm, rope, kv, 9);
}

}  // namespace kiln::kernel_test
