// mla_attention (templates/mla_attention.cuh) against ref::mla_attention: absorbed MLA over the
// paged latent cache, prefill over flat batches and decode with split-KV partitions. DeepSeek-V2-Lite
// as generated and with small partitions; DeepSeek-V2's 128 heads (two m-tiles a block); odd: 20
// heads, page size 5, and the tiny models' latents (CUDA-core kernels).
#include <cstring>

#include "runtime/ref/mla.hpp"
#include "templates/mla_attention.cuh"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {
namespace {

constexpr shape::mla_attention with(shape::mla_attention s, int heads, int page_size, int partition, int count) {
  s.heads = heads;
  s.page_size = page_size;
  s.partition = partition;
  s.max_partitions = count;
  return s;
}

template <shape::mla_attention S>
std::string describe(const char* phase, const std::vector<std::pair<int, int>>& seqs) {
  return std::string(phase) + " heads " + std::to_string(S.heads) + " latent " + std::to_string(S.latent) + "+" +
         std::to_string(S.rope) + " page " + std::to_string(S.page_size) + " partition " +
         std::to_string(S.partition) + " seqs (cached+new) " + (seqs.size() > 8 ? std::to_string(seqs.size()) : seq_list(seqs));
}

template <shape::mla_attention S>
std::vector<float> reference(const PagedStep& p, const std::vector<uint16_t>& q, const std::vector<uint16_t>& cache) {
  auto cache_f = bf16_to_f32(cache);
  std::vector<float> ref(static_cast<size_t>(p.step.num_tokens()) * S.heads * S.latent);
  ref::mla_attention(S, bf16_to_f32(q).data(), ref::LatentPages{cache_f.data(), {S.latent + S.rope}, S.page_size},
                     ref.data(), p.step);
  return ref;
}

template <shape::mla_attention S>
void check_mla(StepPhase phase, const std::vector<std::pair<int, int>>& seqs) {
  constexpr int kWidth = S.latent + S.rope;
  std::mt19937 rng(24000 + S.heads * S.latent + S.page_size + static_cast<int>(seqs.size()));
  const PagedStep p = paged_step(seqs, S.page_size, rng, phase);
  const StepBatch& step = p.step;
  const int tokens = step.num_tokens(), num_seqs = step.num_seqs();
  const auto cache = random_bf16(static_cast<size_t>(p.num_pages) * S.page_size * kWidth, rng);
  const auto q = random_bf16(static_cast<size_t>(tokens) * S.heads * kWidth, rng, 0.5f);
  DeviceBuffer<uint16_t> d_q(q), d_cache(cache), d_out(static_cast<size_t>(tokens) * S.heads * S.latent);
  DeviceBuffer<int> d_qs(std::vector<int>(step.query_start.begin(), step.query_start.end()));
  DeviceBuffer<int> d_pos(std::vector<int>(step.positions.begin(), step.positions.end()));
  DeviceBuffer<int> d_ctx(std::vector<int>(step.context_len.begin(), step.context_len.end()));
  DeviceBuffer<int> d_bt(std::vector<int>(step.block_tables.begin(), step.block_tables.end()));
  DeviceBuffer<float> d_scratch(static_cast<size_t>(mla_attention_decode_scratch_floats<S>(num_seqs)));
  d_out.poison();
  d_scratch.poison();
  if (phase == StepPhase::prefill) {
    kiln::mla_attention_prefill<S>(as_bf16(d_q), as_bf16(d_cache), as_bf16_mut(d_out), d_qs.get(), d_pos.get(),
                                   d_bt.get(), step.max_pages_per_seq, num_seqs, step.max_query_len(), nullptr);
  } else {
    kiln::mla_attention_decode<S>(as_bf16(d_q), as_bf16(d_cache), as_bf16_mut(d_out), d_ctx.get(), d_bt.get(),
                                  step.max_pages_per_seq, num_seqs, d_scratch.get(), nullptr);
  }
  const std::string what = describe<S>(phase == StepPhase::prefill ? "mla_attention_prefill" : "mla_attention_decode", seqs);
  check_launch(what);
  check_close(what, reference<S>(p, q, cache), bf16_to_f32(d_out.download()), kBf16Limit);
}

std::vector<std::pair<int, int>> decodes(const std::vector<int>& contexts) {
  std::vector<std::pair<int, int>> seqs;
  for (int c : contexts) seqs.emplace_back(c - 1, 1);
  return seqs;
}

}  // namespace

TEST_CASE("mla_attention, prefill", "[mla_attention]") {
  const std::vector<std::pair<int, int>> mixed = {{0, 1}, {0, 7}, {0, 300}, {1200, 300}};
  check_mla<dsv2lite::kMlaAttention>(StepPhase::prefill, mixed);
  check_mla<with(dsv2lite::kMlaAttention, 128, 16, 512, 16)>(StepPhase::prefill, {{0, 1}, {0, 7}, {250, 50}, {1480, 20}});
  check_mla<with(dsv2lite::kMlaAttention, 16, 5, 512, 16)>(StepPhase::prefill, {{0, 70}, {33, 9}, {0, 1}});  // page 5
  check_mla<with(dsv2lite::kMlaAttention, 20, 16, 512, 16)>(StepPhase::prefill, {{0, 33}, {100, 3}});      // 20 heads
  check_mla<tiny_ds::kMlaAttention>(StepPhase::prefill, {{0, 37}, {5, 3}, {0, 1}});
  check_mla<tiny_ds_lite::kMlaAttention>(StepPhase::prefill, {{0, 37}, {5, 3}, {0, 1}});
  check_mla<dsv2lite::kMlaAttention>(StepPhase::prefill, {{0, 2048}});
}

TEST_CASE("mla_attention, decode", "[mla_attention]") {
  const auto contexts = decodes({1, 7, 300, 1500});
  check_mla<with(dsv2lite::kMlaAttention, 16, 16, 64, 32)>(StepPhase::decode, contexts);
  check_mla<with(dsv2lite::kMlaAttention, 128, 16, 64, 32)>(StepPhase::decode, contexts);
  check_mla<with(dsv2lite::kMlaAttention, 20, 5, 64, 32)>(StepPhase::decode, contexts);
  check_mla<dsv2lite::kMlaAttention>(StepPhase::decode, decodes({1, 513, 4000, 8192}));  // as generated
  std::vector<int> batch(64);
  for (int i = 0; i < 64; ++i) batch[i] = 1 + (i * 997) % 3000;
  check_mla<dsv2lite::kMlaAttention>(StepPhase::decode, decodes(batch));
  check_mla<tiny_ds::kMlaAttention>(StepPhase::decode, decodes({1, 100, 512}));
  check_mla<tiny_ds_lite::kMlaAttention>(StepPhase::decode, decodes({1, 100, 512}));
}

// A sequence's partitions come from its context alone, so its decode row has the same bits alone
// as in a batch; alone it takes the kernel's two-stage build, in a batch of 12 (192 blocks, past
// the 114-132 an H100 or H200 holds of it) the one-stage build.
TEST_CASE("mla_attention, decode gives a sequence the same bits alone and in a batch", "[mla_attention][invariance]") {
  constexpr shape::mla_attention S = dsv2lite::kMlaAttention;
  constexpr int kWidth = S.latent + S.rope;
  std::mt19937 rng(31337);
  const PagedStep p = paged_step(decodes({1, 64, 65, 150, 700, 1500, 8192, 2, 129, 200, 1025, 3000}), S.page_size, rng,
                                 StepPhase::decode);
  const StepBatch& step = p.step;
  const int num_seqs = step.num_seqs();
  const size_t q_row = static_cast<size_t>(S.heads) * kWidth, out_row = static_cast<size_t>(S.heads) * S.latent;
  DeviceBuffer<uint16_t> d_cache(random_bf16(static_cast<size_t>(p.num_pages) * S.page_size * kWidth, rng));
  DeviceBuffer<uint16_t> d_q(random_bf16(num_seqs * q_row, rng, 0.5f)), d_out(num_seqs * out_row);
  DeviceBuffer<int> d_ctx(std::vector<int>(step.context_len.begin(), step.context_len.end()));
  DeviceBuffer<int> d_bt(std::vector<int>(step.block_tables.begin(), step.block_tables.end()));
  DeviceBuffer<float> d_scratch(static_cast<size_t>(mla_attention_decode_scratch_floats<S>(num_seqs)));
  auto run = [&](int first, int count) {
    d_out.poison();
    kiln::mla_attention_decode<S>(as_bf16(d_q) + first * q_row, as_bf16(d_cache), as_bf16_mut(d_out),
                                  d_ctx.get() + first, d_bt.get() + static_cast<size_t>(first) * step.max_pages_per_seq,
                                  step.max_pages_per_seq, count, d_scratch.get(), nullptr);
    check_launch("mla_attention_decode");
    return d_out.download();
  };
  const auto batched = run(0, num_seqs);
  const auto batched_f = bf16_to_f32(batched);  // written everywhere (the poison is NaN), so the bits compared are outputs
  CHECK(std::all_of(batched_f.begin(), batched_f.end(), [](float v) { return std::isfinite(v); }));
  for (int s = 0; s < num_seqs; ++s) {
    INFO("mla_attention_decode: a sequence of context " << step.context_len[s] << " alone and in a batch of "
                                                         << num_seqs);
    const auto alone = run(s, 1);
    CHECK(std::memcmp(alone.data(), batched.data() + s * out_row, out_row * 2) == 0);
  }
}

}  // namespace kiln::kernel_test
