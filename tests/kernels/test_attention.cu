// attention (templates/attention.cuh) against ref::attention over a paged KV cache: prefill over
// flat batches of sequences with cached and new tokens, decode over one new token per sequence,
// pages handed out in shuffled order. The models' layouts as generated, and with small partitions
// (several partitions and their merge at modest contexts); odd ones: head dim 48 and 40 (CUDA
// cores), page size 5, no GQA, head dim 128 with either. On Hopper the prefill of head dims 64 and
// 128 runs the wgmma kernel; the mma.sync kernel other GPUs run is launched directly beside it.
#include <algorithm>
#include <cmath>

#include "runtime/ref/ops.hpp"
#include "templates/attention.cuh"
#include "tests/kernels/fp8_inputs.hpp"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {
namespace {

// `s` with decode partitions of `partition` keys, `count` of them.
constexpr shape::attention with_partitions(shape::attention s, int partition, int count) {
  s.partition = partition;
  s.max_partitions = count;
  return s;
}

constexpr shape::attention kOdd48{.heads = 6, .kv_heads = 2, .head_dim = 48, .page_size = 5, .row = 480,
                                  .scale = 0.14433756f, .partition = 64, .max_partitions = 32};
constexpr shape::attention kOdd40{.heads = 6, .kv_heads = 2, .head_dim = 40, .page_size = 5, .row = 400,
                                  .scale = 0.15811388f, .partition = 64, .max_partitions = 32};
constexpr shape::attention kNoGqa{.heads = 6, .kv_heads = 6, .head_dim = 64, .page_size = 7, .row = 1152,
                                  .scale = 0.125f, .partition = 512, .max_partitions = 16};
// Head dim 128 (the wgmma kernel's two swizzled areas a row) without GQA, and with 5-token pages
// and 5 query heads a KV head (a block's 128 rows split tokens across its warpgroups).
constexpr shape::attention kNoGqa128{.heads = 4, .kv_heads = 4, .head_dim = 128, .page_size = 16, .row = 1536,
                                     .scale = 0.08838835f, .partition = 512, .max_partitions = 16};
// Llama-3.1-8B's heads (4 query heads a KV head at head dim 128).
constexpr shape::attention kLlama8b{.heads = 32, .kv_heads = 8, .head_dim = 128, .page_size = 16, .row = 6144,
                                    .scale = 0.08838835f, .partition = 512, .max_partitions = 16};
constexpr shape::attention kPage5x128{.heads = 10, .kv_heads = 2, .head_dim = 128, .page_size = 5, .row = 1792,
                                      .scale = 0.08838835f, .partition = 512, .max_partitions = 16};

template <shape::attention S>
std::string describe(const char* phase, const std::vector<std::pair<int, int>>& seqs) {
  return std::string(phase) + " heads " + std::to_string(S.heads) + "/" + std::to_string(S.kv_heads) + "x" +
         std::to_string(S.head_dim) + " page " + std::to_string(S.page_size) + " partition " +
         std::to_string(S.partition) + " seqs (cached+new) " + seq_list(seqs);
}

// The reference output of a step over a cache of random keys and values.
template <shape::attention S>
std::vector<float> reference(const PagedStep& p, const std::vector<uint16_t>& q, const std::vector<uint16_t>& cache) {
  auto cache_f = bf16_to_f32(cache);
  std::vector<float> ref(static_cast<size_t>(p.step.num_tokens()) * S.heads * S.head_dim);
  ref::attention(S, bf16_to_f32(q).data(), ref::KvPages{cache_f.data(), {S.kv_heads, S.head_dim, S.page_size}},
                 ref.data(), p.step);
  return ref;
}

// A prefill step over a cache of random keys and values, on the device.
template <shape::attention S>
struct PrefillInputs {
  PagedStep p;
  std::vector<uint16_t> cache, q;
  DeviceBuffer<uint16_t> d_q, d_cache, d_out;
  DeviceBuffer<int> d_qs, d_pos, d_bt;

  PrefillInputs(const std::vector<std::pair<int, int>>& seqs, std::mt19937 rng)
      : p(paged_step(seqs, S.page_size, rng)),
        cache(random_bf16(static_cast<size_t>(p.num_pages) * 2 * S.kv_heads * S.page_size * S.head_dim, rng)),
        q(random_bf16(static_cast<size_t>(p.step.num_tokens()) * S.row, rng)),
        d_q(q),
        d_cache(cache),
        d_out(static_cast<size_t>(p.step.num_tokens()) * S.heads * S.head_dim),
        d_qs(std::vector<int>(p.step.query_start.begin(), p.step.query_start.end())),
        d_pos(std::vector<int>(p.step.positions.begin(), p.step.positions.end())),
        d_bt(std::vector<int>(p.step.block_tables.begin(), p.step.block_tables.end())) {
    d_out.poison();
  }
  // attention_prefill into d_out, or, given FP8 rows, into those.
  void run(Fp8Rows out_fp8 = {}) {
    kiln::attention_prefill<S>(as_bf16(d_q), as_bf16(d_cache), as_bf16_mut(d_out), d_qs.get(), d_pos.get(), d_bt.get(),
                               p.step.max_pages_per_seq, p.step.num_seqs(), p.step.max_query_len(), out_fp8,
                               p.step.num_tokens(), nullptr);
  }
};

// kMma: the mma.sync kernel launched directly, as a GPU without wgmma runs it (attention_prefill
// chooses the wgmma kernel on Hopper for head dims 64 and 128).
template <shape::attention S, bool kMma = false>
void check_prefill(const std::vector<std::pair<int, int>>& seqs) {
  PrefillInputs<S> in(seqs, std::mt19937(9000 + S.heads * S.head_dim + static_cast<int>(seqs.size())));
  const StepBatch& step = in.p.step;
  if constexpr (kMma) {
    const detail::PagedKv<S.kv_heads, S.head_dim, S.page_size> kv{as_bf16(in.d_cache), in.d_bt.get(),
                                                                   step.max_pages_per_seq};
    detail::launch_prefill_mma<S.heads, S.kv_heads, S.head_dim, S.head_dim, S.row>(
        as_bf16(in.d_q), kv, as_bf16_mut(in.d_out), in.d_qs.get(), in.d_pos.get(), step.num_seqs(),
        step.max_query_len(), S.scale, nullptr);
  } else {
    in.run();
  }
  const std::string what = describe<S>(kMma ? "attention_prefill (mma.sync)" : "attention_prefill", seqs);
  check_launch(what);
  check_close(what, reference<S>(in.p, in.q, in.cache), bf16_to_f32(in.d_out.download()), kBf16Limit);
}

// The prefill's rows written as o_proj's FP8 inputs (templates/fp8_rows.hpp): the codes and scales
// of the bf16 rows the same call writes without them, bit for bit, the padding rows included; the
// bf16 rows not written where the wgmma kernel writes the codes itself (head dim 128, a scale per
// 128 columns).
template <shape::attention S>
void check_prefill_fp8(const std::vector<std::pair<int, int>>& seqs) {
  PrefillInputs<S> in(seqs, std::mt19937(9100 + S.heads * S.head_dim + static_cast<int>(seqs.size())));
  const bool direct = S.head_dim == kFp8InputBlock && detail::wgmma_device();
  check_fp8_output(describe<S>(direct ? "attention_prefill into FP8 inputs" : "attention_prefill, then its FP8 inputs",
                               seqs),
                   in.p.step.num_tokens(), S.heads * S.head_dim, in.d_out, [&] { in.run(); },
                   [&](Fp8Rows rows) { in.run(rows); }, !direct, true);
}

template <shape::attention S>
void check_decode(const std::vector<int>& contexts) {
  std::vector<std::pair<int, int>> seqs;
  for (int c : contexts) seqs.emplace_back(c - 1, 1);
  std::mt19937 rng(10000 + S.heads * S.head_dim + static_cast<int>(contexts.size()));
  const PagedStep p = paged_step(seqs, S.page_size, rng, StepPhase::decode);
  const StepBatch& step = p.step;
  const int num_seqs = step.num_seqs();
  const auto cache = random_bf16(static_cast<size_t>(p.num_pages) * 2 * S.kv_heads * S.page_size * S.head_dim, rng);
  const auto q = random_bf16(static_cast<size_t>(num_seqs) * S.row, rng);
  DeviceBuffer<uint16_t> d_q(q), d_cache(cache), d_out(static_cast<size_t>(num_seqs) * S.heads * S.head_dim);
  DeviceBuffer<int> d_ctx(std::vector<int>(step.context_len.begin(), step.context_len.end()));
  DeviceBuffer<int> d_bt(std::vector<int>(step.block_tables.begin(), step.block_tables.end()));
  DeviceBuffer<float> d_scratch(static_cast<size_t>(attention_decode_scratch_floats<S>(num_seqs)));
  d_out.poison();
  d_scratch.poison();
  kiln::attention_decode<S>(as_bf16(d_q), as_bf16(d_cache), as_bf16_mut(d_out), d_ctx.get(), d_bt.get(),
                            step.max_pages_per_seq, num_seqs, d_scratch.get(), nullptr);
  const std::string what = describe<S>("attention_decode", seqs);
  check_launch(what);
  check_close(what, reference<S>(p, q, cache), bf16_to_f32(d_out.download()), kBf16Limit);
}

}  // namespace

TEST_CASE("attention, prefill: flat batches of cached and new tokens", "[attention]") {
  const std::vector<std::pair<int, int>> mixed = {{0, 300}, {700, 1}, {50, 77}, {0, 1}, {1000, 130}};
  check_prefill<llama1b::kAttention>(mixed);
  check_prefill<qwen06::kAttention>(mixed);
  check_prefill<smollm2::kAttention>(mixed);
  check_prefill<kOdd48>(mixed);
  check_prefill<tiny_qwen3::kAttention>({{0, 64}, {13, 1}, {0, 65}});
  check_prefill<kOdd40>({{0, 70}, {33, 9}});  // head dim 40: the CUDA-core kernel
  check_prefill<kNoGqa>({{0, 129}, {200, 64}});
  check_prefill<llama1b::kAttention>({{0, 2048}});
  // Head dim 128 over many key tiles and odd lengths: a chunk after cached tokens, a lone token.
  check_prefill<qwen06::kAttention>({{0, 1031}, {517, 300}, {2000, 1}});
  check_prefill<kNoGqa128>({{0, 333}, {64, 64}});
  check_prefill<kPage5x128>({{0, 200}, {99, 130}});
}

TEST_CASE("attention, prefill: the rows as the FP8 inputs of the projection after it", "[attention]") {
  // Head dim 128 (Qwen3-0.6B's 16 heads over 8; 10 over 2 with 5-token pages; no GQA): the wgmma
  // kernel writes them on Hopper; head dim 64 (Llama-3.2-1B) a pass after it. 509 and 205 tokens:
  // padding rows up to 512 and 208.
  const std::vector<std::pair<int, int>> mixed = {{0, 300}, {700, 1}, {50, 77}, {0, 1}, {1000, 130}};
  check_prefill_fp8<qwen06::kAttention>(mixed);
  check_prefill_fp8<llama1b::kAttention>(mixed);
  check_prefill_fp8<kPage5x128>({{0, 75}, {99, 130}});
  check_prefill_fp8<kNoGqa128>({{0, 64}, {64, 64}});
}

TEST_CASE("attention, prefill: the mma.sync kernel (GPUs without wgmma)", "[attention]") {
  const std::vector<std::pair<int, int>> mixed = {{0, 300}, {700, 1}, {50, 77}, {0, 1}, {1000, 130}};
  check_prefill<llama1b::kAttention, true>(mixed);
  check_prefill<qwen06::kAttention, true>(mixed);
  check_prefill<kNoGqa, true>({{0, 129}, {200, 64}});
  // 2,100 tokens of 4 heads a KV head: 132 tiles of 64 rows, past kHeadsInnerTiles, so the blocks
  // go a head's tiles in a row (prefill_rows.cuh's heads outer; every case above, heads inner).
  check_prefill<llama1b::kAttention, true>({{0, 2100}, {40, 300}});
}

TEST_CASE("attention, decode: split-KV partitions and their merge", "[attention]") {
  const std::vector<int> contexts = {1, 7, 200, 1500};
  check_decode<with_partitions(llama1b::kAttention, 64, 32)>(contexts);
  check_decode<with_partitions(qwen06::kAttention, 64, 32)>(contexts);
  check_decode<with_partitions(smollm2::kAttention, 64, 32)>(contexts);
  check_decode<kOdd48>(contexts);
  check_decode<kOdd40>(contexts);
  check_decode<llama1b::kAttention>({1, 513, 4000, 8192});  // as generated: partitions of 512 up to 8192 keys
  // Past 32 partitions of 64 keys, fewer bigger ones (split_kv_partition_keys).
  check_decode<with_partitions(llama1b::kAttention, 64, 200)>({2048, 2049, 6001, 12800});
  check_decode<tiny_qwen3::kAttention>({1, 100, 512});
  check_decode<kLlama8b>({1, 9, 160, 513, 8000});
  check_decode<with_partitions(kLlama8b, 64, 32)>({1, 63, 64, 65, 200, 1500});
  check_decode<kNoGqa128>({1, 7, 200, 1500});
  check_decode<kPage5x128>({1, 7, 200, 1500});
  std::vector<int> batch(64);
  for (int i = 0; i < 64; ++i) batch[i] = 1 + (i * 997) % 3000;
  check_decode<llama1b::kAttention>(batch);
}

}  // namespace kiln::kernel_test
