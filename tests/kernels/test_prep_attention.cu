// prep_attention (templates/prep_attention.cuh), the decode's fused attention, against its parts
// as the per-op path ran them: attention_prep then attention_decode, on the same inputs. The same
// device functions in the same order, so the outputs and the cache must match bit for bit (a
// sequence's tokens must not depend on which path ran them). Contexts span several partitions (the
// merge by the last block), the kernel runs twice on the same counters (the merging block zeroes
// them again), with its grid sized from the GPU and with fewer partition slots than partitions
// (a block attends several in turn), and a batch of 64 sequences runs at the models' own partitions.
#include <algorithm>
#include <iterator>

#include "runtime/model/rope_table.hpp"
#include "templates/attention.cuh"
#include "templates/prep_attention.cuh"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {
namespace {

constexpr shape::prep_attention with_partitions(shape::prep_attention s, int partition, int count) {
  s.partition = partition;
  s.max_partitions = count;
  return s;
}

// The fused op's parts: its attention_prep and attention shapes.
constexpr shape::attention_prep prep_of(shape::prep_attention s) {
  return {.heads = s.heads, .kv_heads = s.kv_heads, .head_dim = s.head_dim, .row = s.row, .page_size = s.page_size,
          .qk_norm = s.qk_norm, .eps = s.eps};
}
constexpr shape::attention attention_of(shape::prep_attention s) {
  return {.heads = s.heads, .kv_heads = s.kv_heads, .head_dim = s.head_dim, .page_size = s.page_size, .row = s.row,
          .scale = s.scale, .partition = s.partition, .max_partitions = s.max_partitions};
}

bool same_bits(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, long long& differ) {
  differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
  return differ == 0 && a.size() == b.size();
}

template <shape::prep_attention S>
void check_prep_attention(const std::vector<int>& contexts) {
  std::vector<std::pair<int, int>> seqs;
  for (int c : contexts) seqs.emplace_back(c - 1, 1);
  std::mt19937 rng(12000 + S.heads * S.head_dim + static_cast<int>(contexts.size()));
  const PagedStep p = paged_step(seqs, S.page_size, rng, StepPhase::decode);
  const StepBatch& step = p.step;
  const int num_seqs = step.num_seqs();
  const size_t cache_elems = static_cast<size_t>(p.num_pages) * 2 * S.kv_heads * S.page_size * S.head_dim;
  const auto cache = random_bf16(cache_elems, rng);
  const auto qkv = random_bf16(static_cast<size_t>(num_seqs) * S.row, rng, 2.0f);
  const auto q_norm = random_bf16(S.head_dim, rng), k_norm = random_bf16(S.head_dim, rng);
  const int max_position = *std::max_element(step.positions.begin(), step.positions.end());
  const auto table = build_rope_table(RopeInfo{.theta = 1e6, .rotary_dim = S.head_dim}, max_position + 1);
  const size_t out_elems = static_cast<size_t>(num_seqs) * S.heads * S.head_dim;
  const size_t scratch = static_cast<size_t>(prep_attention_scratch_floats<S>(num_seqs));

  DeviceBuffer<uint16_t> d_qn(q_norm), d_kn(k_norm);
  DeviceBuffer<int> d_pos(std::vector<int>(step.positions.begin(), step.positions.end()));
  DeviceBuffer<int> d_slots(std::vector<int>(step.slot_mapping.begin(), step.slot_mapping.end()));
  DeviceBuffer<int> d_ctx(std::vector<int>(step.context_len.begin(), step.context_len.end()));
  DeviceBuffer<int> d_bt(std::vector<int>(step.block_tables.begin(), step.block_tables.end()));
  DeviceBuffer<float> d_table(table);
  const bf16* qn = S.qk_norm ? as_bf16(d_qn) : nullptr;
  const bf16* kn = S.qk_norm ? as_bf16(d_kn) : nullptr;

  // The parts, as the per-op decode ran them.
  DeviceBuffer<uint16_t> parts_qkv(qkv), parts_cache(cache), parts_out(out_elems);
  DeviceBuffer<float> parts_scratch(scratch);
  parts_out.poison();
  parts_scratch.poison();
  kiln::attention_prep<prep_of(S)>(as_bf16_mut(parts_qkv), qn, kn, d_pos.get(), d_table.get(), d_slots.get(),
                                 as_bf16_mut(parts_cache), num_seqs, nullptr);
  kiln::attention_decode<attention_of(S)>(as_bf16(parts_qkv), as_bf16(parts_cache), as_bf16_mut(parts_out), d_ctx.get(),
                                   d_bt.get(), step.max_pages_per_seq, num_seqs, parts_scratch.get(), nullptr);
  const std::string what = "prep_attention heads " + std::to_string(S.heads) + "/" + std::to_string(S.kv_heads) + "x" +
                           std::to_string(S.head_dim) + (S.qk_norm ? " qk_norm" : "") + " partition " +
                           std::to_string(S.partition) + " contexts " + seq_list(seqs);
  check_launch(what + ": the parts");

  // Fused, twice on the same counters: with the grid as the decode launches it (slots and build
  // chosen from the GPU), with fewer partition slots than partitions (a block attends several, in
  // turn), and with each build of the kernel (one, two and four blocks an SM) forced.
  DeviceBuffer<uint16_t> d_qkv(qkv), d_cache(cache), d_out(out_elems);
  DeviceBuffer<float> d_scratch(scratch);
  DeviceBuffer<unsigned> d_counters(std::vector<unsigned>(static_cast<size_t>(num_seqs) * S.kv_heads, 0u));
  d_scratch.poison();
  // {partition slots, blocks an SM}; 0: chosen
  constexpr int kGrids[][2] = {{0, 0}, {1, 1}, {3, 2}, {0, 2}, {2, 4}, {0, 4}};
  for (int run = 0; run < 2 * static_cast<int>(std::size(kGrids)); ++run) {
    const int launched = kGrids[run / 2][0], blocks_per_sm = kGrids[run / 2][1];
    d_out.poison();
    kiln::prep_attention<S>(as_bf16(d_qkv), qn, kn, d_pos.get(), d_table.get(), d_slots.get(), as_bf16_mut(d_cache),
                            as_bf16_mut(d_out), d_ctx.get(), d_bt.get(), step.max_pages_per_seq, num_seqs,
                            d_scratch.get(), d_counters.get(), nullptr, launched, blocks_per_sm);
    const std::string slots = launched == 0 ? std::string("from the GPU") : std::to_string(launched);
    const std::string build = blocks_per_sm == 0 ? std::string("chosen") : std::to_string(blocks_per_sm) + " an SM";
    const std::string this_run = what + ", partition slots " + slots + ", build " + build +
                                 (run % 2 == 0 ? ", first launch" : ", second launch");
    check_launch(this_run);
    long long out_differ = 0, cache_differ = 0;
    const bool out_same = same_bits(parts_out.download(), d_out.download(), out_differ);
    const bool cache_same = same_bits(parts_cache.download(), d_cache.download(), cache_differ);
    const auto counters = d_counters.download();
    INFO(this_run << ": output elements that differ " << out_differ << ", cache elements " << cache_differ);
    CHECK(out_same);
    CHECK(cache_same);
    CHECK(std::all_of(counters.begin(), counters.end(), [](unsigned c) { return c == 0; }));
  }
  CHECK(qkv == d_qkv.download());  // the fused kernel keeps its q heads in shared memory
}

}  // namespace

// The grid's partition slots (checked as the tests build, GPU or not): all of them where the GPU
// holds them beside the other pairs, at least one, all where the GPU's count is unknown.
constexpr shape::prep_attention kSlotsShape = llama1b::kPrepAttention;  // 8 KV heads, 16 partitions
static_assert(prep_attention_launched_parts<kSlotsShape>(1, 264) == kSlotsShape.max_partitions);
static_assert(prep_attention_launched_parts<kSlotsShape>(8, 264) == 264 / (8 * kSlotsShape.kv_heads));
static_assert(prep_attention_launched_parts<kSlotsShape>(64, 264) == 1);
static_assert(prep_attention_launched_parts<kSlotsShape>(64, 0) == kSlotsShape.max_partitions);
// The build: one block an SM while that holds every partition of the batch (8 × 16 of one
// sequence), two beyond, four where the pairs are more than two an SM hold and four hold more; one
// where the GPU's count is unknown.
static_assert(prep_attention_blocks_per_sm<kSlotsShape>(1, 132) == 1);
static_assert(prep_attention_blocks_per_sm<kSlotsShape>(2, 132) == 2);
static_assert(prep_attention_blocks_per_sm<kSlotsShape>(64, 132) == 2);
static_assert(prep_attention_blocks_per_sm<kSlotsShape>(64, 0) == 1);
static_assert(prep_attention_blocks_per_sm<kSlotsShape>(1, 132, 264, 528) == 1);
static_assert(prep_attention_blocks_per_sm<kSlotsShape>(8, 132, 264, 528) == 2);
static_assert(prep_attention_blocks_per_sm<kSlotsShape>(33, 132, 264, 528) == 2);  // 264 pairs: one wave of two
static_assert(prep_attention_blocks_per_sm<kSlotsShape>(34, 132, 264, 528) == 4);
static_assert(prep_attention_blocks_per_sm<kSlotsShape>(64, 132, 264, 264) == 2);  // four an SM hold no more
static_assert(prep_attention_blocks_per_sm<kSlotsShape>(64, 132, 264, 0) == 2);    // the four build not used
// A long context's partitions grow past 32 of them: the slots stop there.
constexpr shape::prep_attention kLongShape = with_partitions(llama1b::kPrepAttention, 512, 65);
static_assert(prep_attention_launched_parts<kLongShape>(1, 264) == detail::kSplitKvSpread);
static_assert(detail::split_kv_max_partition_keys<512, 65>() == 1088);  // 33,280 keys at most: 1,088 a partition
static_assert(detail::split_kv_max_partition_keys<512, 16>() == 512);

// Llama-3.1-8B's heads (4 query heads a KV head at head dim 128), with its ring of passes.
constexpr shape::prep_attention kLlama8bPrep = [] {
  shape::prep_attention s = llama1b::kPrepAttention;
  s.head_dim = 128;
  s.row = 6144;
  s.scale = 0.08838835f;
  return s;
}();

TEST_CASE("prep_attention equals attention_prep then attention_decode, bit for bit", "[attention]") {
  const std::vector<int> contexts = {1, 7, 200, 1500};
  check_prep_attention<with_partitions(llama1b::kPrepAttention, 64, 32)>(contexts);
  check_prep_attention<with_partitions(qwen06::kPrepAttention, 64, 32)>(contexts);
  check_prep_attention<with_partitions(smollm2::kPrepAttention, 64, 32)>(contexts);
  check_prep_attention<with_partitions(tiny_qwen3::kPrepAttention, 16, 40)>({1, 16, 17, 100, 640});
  check_prep_attention<llama1b::kPrepAttention>({1, 513, 4000, 8192});
  check_prep_attention<kLlama8bPrep>({1, 64, 65, 160, 8000});
  // Past 32 partitions of 64 keys they grow (split_kv_partition_keys): 2,049 keys in 17 of 128,
  // 12,800 in 29 of 448.
  check_prep_attention<with_partitions(llama1b::kPrepAttention, 64, 200)>({1, 2048, 2049, 6001, 12800});
  std::vector<int> batch(64);
  for (int i = 0; i < 64; ++i) batch[i] = 1 + (i * 997) % 3000;
  check_prep_attention<qwen06::kPrepAttention>(batch);
}

}  // namespace kiln::kernel_test
