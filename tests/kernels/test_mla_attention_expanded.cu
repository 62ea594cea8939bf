// mla_attention_expanded's prefill (runtime/cuda/mla_expanded.hpp, templates/mla_attention_expanded.cuh):
// MLA attention over keys and values expanded from the paged latent cache, against the absorbed
// reference chain the decode and the CPU run (ref::mla_q_absorb, ref::mla_attention, ref::mla_v_up).
// DeepSeek-V2-Lite as generated (tensor cores) and the tiny models' odd head dims (CUDA cores); a
// workspace of 2,048 keys, so that a step's sequences go in several groups. On Hopper the wgmma
// kernel runs; the mma.sync kernel other GPUs run is launched directly beside it over the same
// workspace (steps of one group). And batch invariance:
// a prompt's rows are the same bits alone, in chunks over its cached keys, and behind other
// prompts in another group.
#include <map>
#include <numeric>

#include "runtime/cuda/mla_expanded.hpp"
#include "runtime/ref/mla.hpp"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {
namespace {

constexpr shape::mla_attention_expanded with_keys(shape::mla_attention_expanded s, int keys) {
  s.keys = keys;
  return s;
}

// One prompt's latent rows and q rows by position, so that any step over it sees the same values.
template <shape::mla_attention_expanded S>
struct Prompt {
  static constexpr int kWidth = S.latent + S.rope, kQRow = S.heads * (S.nope + S.rope);
  std::vector<uint16_t> latent, q;  // [length, kWidth], [length, kQRow]
  Prompt(int length, std::mt19937& rng)
      : latent(random_bf16(size_t(length) * kWidth, rng)), q(random_bf16(size_t(length) * kQRow, rng, 0.5f)) {}
};

// A part of a step: prompt `prompt`, positions [cached, cached + fresh) new.
struct Part {
  int prompt, cached, fresh;
};

// The weights of the tests: W_UK [heads × nope, latent], W_UV [heads × v, latent].
template <shape::mla_attention_expanded S>
struct Weights {
  std::vector<uint16_t> w_uk, w_uv;
  explicit Weights(std::mt19937& rng)
      : w_uk(random_bf16(size_t(S.heads) * S.nope * S.latent, rng, 0.08f)),
        w_uv(random_bf16(size_t(S.heads) * S.v * S.latent, rng, 0.08f)) {}
};

template <shape::mla_attention_expanded S>
struct Run {
  PagedStep paged;
  std::vector<uint16_t> cache, q, out;  // out [T, heads × v]
  std::vector<uint16_t> out_mma;        // the mma.sync kernel's, where asked
};

// One prefill step over `parts` through cuda::mla_attention_expanded with workspace S.keys; with
// `mma`, the mma.sync kernel too, over the workspace the step left (its one group).
template <shape::mla_attention_expanded S>
Run<S> run_expanded(const std::vector<Prompt<S>>& prompts, const std::vector<Part>& parts, const Weights<S>& w,
                    cuda::GemmRunner& runner, std::mt19937& rng, bool mma = false) {
  constexpr int kWidth = Prompt<S>::kWidth, kQRow = Prompt<S>::kQRow;
  std::vector<std::pair<int, int>> seqs;
  for (const Part& p : parts) seqs.emplace_back(p.cached, p.fresh);
  Run<S> run{paged_step(seqs, S.page_size, rng), {}, {}, {}};
  const StepBatch& step = run.paged.step;
  run.cache = random_bf16(size_t(run.paged.num_pages) * S.page_size * kWidth, rng);  // unused slots: noise
  run.q.resize(size_t(step.num_tokens()) * kQRow);
  for (int s = 0; s < step.num_seqs(); ++s) {
    const Prompt<S>& prompt = prompts[parts[s].prompt];
    const int* table = step.block_tables.data() + size_t(s) * step.max_pages_per_seq;
    for (int pos = 0; pos < step.context_len[s]; ++pos) {
      const size_t slot = size_t(table[pos / S.page_size]) * S.page_size + pos % S.page_size;
      std::copy_n(prompt.latent.begin() + size_t(pos) * kWidth, kWidth, run.cache.begin() + slot * kWidth);
    }
    for (int t = step.query_start[s]; t < step.query_start[s + 1]; ++t) {
      std::copy_n(prompt.q.begin() + size_t(step.positions[t]) * kQRow, kQRow, run.q.begin() + size_t(t) * kQRow);
    }
  }
  DeviceBuffer<uint16_t> d_q(run.q), d_cache(run.cache), d_uk(w.w_uk), d_uv(w.w_uv);
  DeviceBuffer<uint16_t> d_out(size_t(step.num_tokens()) * S.heads * S.v);
  DeviceBuffer<uint16_t> d_workspace(size_t(S.keys) * MlaExpanded<S>::kValuesPerKey);
  DeviceBuffer<int> d_qs(std::vector<int>(step.query_start.begin(), step.query_start.end()));
  DeviceBuffer<int> d_pos(std::vector<int>(step.positions.begin(), step.positions.end()));
  DeviceBuffer<int> d_ctx(std::vector<int>(step.context_len.begin(), step.context_len.end()));
  DeviceBuffer<int> d_bt(std::vector<int>(step.block_tables.begin(), step.block_tables.end()));
  d_out.poison();
  d_workspace.poison();
  CudaContext ctx;
  ctx.gemm = &runner;
  ctx.mla_expanded = as_bf16_mut(d_workspace);
  CudaStep d;
  d.num_tokens = step.num_tokens();
  d.num_seqs = step.num_seqs();
  d.max_query_len = step.max_query_len();
  d.max_pages_per_seq = step.max_pages_per_seq;
  d.positions = d_pos.get();
  d.query_start = d_qs.get();
  d.context_len = d_ctx.get();
  d.block_tables = d_bt.get();
  d.host_context_len = step.context_len.data();
  cuda::mla_attention_expanded<S>(ctx, as_bf16(d_q), as_bf16(d_uk), as_bf16(d_uv), as_bf16(d_cache),
                                  as_bf16_mut(d_out), d);
  run.out = d_out.download();
  if constexpr (detail::PrefillShape<S.heads, S.heads, S.nope + S.rope, S.v>::kSupported && S.nope % 8 == 0) {
    if (mma) {
      REQUIRE(std::accumulate(step.context_len.begin(), step.context_len.end(), 0) <= S.keys);
      const MlaExpanded<S> workspace(as_bf16_mut(d_workspace));
      const detail::ExpandedKv<S.heads, S.nope, S.rope, S.v> kv{workspace.k_nope, workspace.k_rope, workspace.v,
                                                                 d_ctx.get()};
      d_out.poison();
      detail::launch_prefill_mma<S.heads, S.heads, S.nope + S.rope, S.v, kQRow>(
          as_bf16(d_q), kv, as_bf16_mut(d_out), d_qs.get(), d_pos.get(), d.num_seqs, d.max_query_len, S.scale, nullptr);
      run.out_mma = d_out.download();
    }
  }
  return run;
}

// The absorbed chain in fp32 over the same step.
template <shape::mla_attention_expanded S>
std::vector<float> reference(const Run<S>& run, const Weights<S>& w) {
  const StepBatch& step = run.paged.step;
  const int64_t tokens = step.num_tokens();
  constexpr shape::mla_q_absorb kAbsorb{.heads = S.heads, .nope = S.nope, .rope = S.rope, .latent = S.latent};
  constexpr shape::mla_attention kAttention{.heads = S.heads, .latent = S.latent, .rope = S.rope,
                                            .page_size = S.page_size, .scale = S.scale, .partition = 512,
                                            .max_partitions = 64};
  constexpr shape::mla_v_up kVUp{.heads = S.heads, .latent = S.latent, .v = S.v};
  std::vector<float> q_mla(size_t(tokens) * S.heads * (S.latent + S.rope)), o_lat(size_t(tokens) * S.heads * S.latent);
  std::vector<float> out(size_t(tokens) * S.heads * S.v);
  ref::mla_q_absorb(kAbsorb, bf16_to_f32(run.q).data(), bf16_to_f32(w.w_uk).data(), q_mla.data(), tokens);
  auto cache = bf16_to_f32(run.cache);
  ref::mla_attention(kAttention, q_mla.data(), ref::LatentPages{cache.data(), {S.latent + S.rope}, S.page_size},
                     o_lat.data(), step);
  ref::mla_v_up(kVUp, o_lat.data(), bf16_to_f32(w.w_uv).data(), out.data(), tokens);
  return out;
}

template <shape::mla_attention_expanded S>
std::string describe(const std::vector<Part>& parts) {
  std::vector<std::pair<int, int>> seqs;
  for (const Part& p : parts) seqs.emplace_back(p.cached, p.fresh);
  return "mla_attention_expanded heads " + std::to_string(S.heads) + " qk " + std::to_string(S.nope) + "+" +
         std::to_string(S.rope) + " v " + std::to_string(S.v) + " latent " + std::to_string(S.latent) + " keys " +
         std::to_string(S.keys) + " seqs (cached+new) " + seq_list(seqs);
}

template <shape::mla_attention_expanded S>
void check_against_reference(const std::vector<Part>& parts, cuda::GemmRunner& runner, bool mma = false) {
  std::mt19937 rng(31000 + S.heads * S.latent + S.keys + static_cast<int>(parts.size()));
  int longest = 0;
  for (const Part& p : parts) longest = std::max(longest, p.cached + p.fresh);
  std::vector<Prompt<S>> prompts;
  for (size_t i = 0; i < parts.size(); ++i) prompts.emplace_back(longest, rng);
  const Weights<S> w(rng);
  const Run<S> run = run_expanded<S>(prompts, parts, w, runner, rng, mma);
  const std::string what = describe<S>(parts);
  check_launch(what);
  const std::vector<float> ref = reference<S>(run, w);
  check_close(what, ref, bf16_to_f32(run.out), kBf16Limit);
  if (mma) check_close(what + " (mma.sync)", ref, bf16_to_f32(run.out_mma), kBf16Limit);
}

// Each (prompt, position) row of every run must equal its row in the first run, bit for bit.
template <shape::mla_attention_expanded S>
void check_invariance(const std::vector<std::vector<Part>>& runs, cuda::GemmRunner& runner) {
  std::mt19937 rng(32000 + S.heads * S.latent);
  std::vector<Prompt<S>> prompts;
  for (int i = 0; i < 3; ++i) prompts.emplace_back(1400, rng);
  const Weights<S> w(rng);
  constexpr int kOut = S.heads * S.v;
  std::map<std::pair<int, int>, std::vector<uint16_t>> first;  // (prompt, position) -> row
  for (size_t r = 0; r < runs.size(); ++r) {
    const Run<S> run = run_expanded<S>(prompts, runs[r], w, runner, rng);
    const StepBatch& step = run.paged.step;
    long long compared = 0, differ = 0;
    for (int s = 0; s < step.num_seqs(); ++s) {
      for (int t = step.query_start[s]; t < step.query_start[s + 1]; ++t) {
        const std::vector<uint16_t> row(run.out.begin() + size_t(t) * kOut, run.out.begin() + size_t(t + 1) * kOut);
        auto [it, fresh] = first.try_emplace({runs[r][s].prompt, step.positions[t]}, row);
        if (fresh) continue;
        ++compared;
        differ += it->second != row;
      }
    }
    const std::string what = "mla_attention_expanded invariance: " + describe<S>(runs[r]) + ", rows compared " +
                             std::to_string(compared) + ", differing " + std::to_string(differ);
    check_launch(what);
    INFO(what);
    CHECK(differ == 0);
    CHECK((r == 0 || compared > 0));
  }
}

}  // namespace

TEST_CASE("mla_attention_expanded, prefill against the absorbed reference", "[mla_attention_expanded]") {
  cuda::GemmRunner runner;
  const std::vector<Part> mixed = {{0, 0, 1}, {1, 0, 7}, {2, 0, 300}, {3, 1200, 300}};
  check_against_reference<dsv2lite::kMlaAttentionExpanded>(mixed, runner, true);
  check_against_reference<dsv2lite::kMlaAttentionExpanded>({{0, 0, 2048}}, runner, true);
  // Three groups: 1,500 + 300 + 7 keys, then 600 + 1,100, then 1,900.
  check_against_reference<with_keys(dsv2lite::kMlaAttentionExpanded, 2048)>(
      {{0, 1200, 300}, {1, 0, 300}, {2, 0, 7}, {3, 550, 50}, {4, 1000, 100}, {5, 1800, 100}}, runner);
  check_against_reference<tiny_ds::kMlaAttentionExpanded>({{0, 0, 37}, {1, 5, 3}, {2, 0, 1}, {3, 200, 60}}, runner);
  check_against_reference<tiny_ds_lite::kMlaAttentionExpanded>({{0, 0, 37}, {1, 5, 3}, {2, 0, 1}, {3, 200, 60}},
                                                                runner);
}

TEST_CASE("mla_attention_expanded: a prompt's rows are the same bits alone, chunked and batched",
          "[mla_attention_expanded][invariance]") {
  cuda::GemmRunner runner;
  const std::vector<std::vector<Part>> runs = {
      {{0, 0, 1400}},                                           // alone, one chunk
      {{0, 0, 512}},                                            // its first chunk
      {{0, 512, 600}, {1, 0, 900}},                             // its second, beside another prompt
      {{2, 0, 1000}, {1, 900, 100}, {0, 1112, 288}},            // its last, third in a step: a group of its own
      {{2, 0, 3}, {0, 0, 700}, {1, 0, 1}},                      // again from the start, in the middle
  };
  check_invariance<with_keys(dsv2lite::kMlaAttentionExpanded, 2048)>(runs, runner);
  check_invariance<tiny_ds::kMlaAttentionExpanded>({{{0, 0, 300}}, {{1, 0, 5}, {0, 0, 100}}, {{0, 100, 200}}}, runner);
}

}  // namespace kiln::kernel_test
