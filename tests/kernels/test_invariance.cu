// Batch invariance: a token's numbers come out bit for bit the same whatever else shares its step,
// so that a request's output equals running it alone:
//   - the decode GEMV at any batch size (1 .. 64),
//   - cuBLASLt's prefill GEMM at any row count, small ones included (a re-admitted sequence
//     prefills the rest of its prompt after prefix-cache hits, often a handful of rows),
//   - prefill attention whether a prompt's queries run in one chunk or several, alone or batched.
//   - DeepSeek-V2's prefill ops with a path of their own: the routed experts (moe_gate_up_prefill,
//     moe_gate_up_act_prefill, moe_down_prefill), the value up-projection (mla_v_up_prefill) and MLA attention.
// Every projection of SmolLM2-135M, Qwen3-0.6B and Llama-3.2-1B, as generated; DeepSeek-V2-Lite's.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <tuple>

#include "runtime/cuda/gemm.hpp"
#include "templates/attention.cuh"
#include "templates/linear.cuh"
#include "templates/mla_attention.cuh"
#include "templates/mla_v_up.cuh"
#include "templates/moe_down.cuh"
#include "templates/moe_gate_up.cuh"
#include "tests/kernels/kernel_test.hpp"
#include "tests/kernels/moe_experts.hpp"

namespace kiln::kernel_test {
namespace {

// Rows [first, first + count) of `whole` equal `part` bit for bit.
template <typename T>
bool same_bits(const std::vector<T>& whole, const std::vector<T>& part, size_t first, size_t width) {
  return std::memcmp(whole.data() + first * width, part.data(), part.size() * sizeof(T)) == 0;
}

template <shape::linear S>
void gemv_invariance() {
  using Out = typename detail::LinearOutType<S.out>::type;
  std::mt19937 rng(S.n * 31 + S.k);
  constexpr int kTokens = 64;
  DeviceBuffer<uint16_t> weight(random_bf16(static_cast<size_t>(S.n) * S.k, rng, 0.05f));
  DeviceBuffer<uint16_t> in(random_bf16(static_cast<size_t>(kTokens) * S.k, rng));
  const std::vector<float> start = random_f32(static_cast<size_t>(kTokens) * S.n, rng);  // the residual (add_f32)
  // The wide plan's partial sums (batches of 33 and 64 take it; 1 and 5 the narrow plan).
  DeviceBuffer<float> scratch(std::max<long long>(1, linear_scratch_floats<S>(kTokens)));
  auto run = [&](int first, int count) {
    DeviceBuffer<Out> out(static_cast<size_t>(count) * S.n);
    if constexpr (S.out == LinearOut::add_f32) {
      out.upload(std::vector<float>(start.begin() + first * S.n, start.begin() + (first + count) * S.n));
    } else {
      out.poison();
    }
    kiln::linear<S>(as_bf16(in) + static_cast<long long>(first) * S.k, as_bf16(weight), out.get(), count, scratch.get(),
                    nullptr);
    check_launch("gemv");
    return out.download();
  };
  const auto all = run(0, kTokens);
  for (int batch : {1, 5, 33}) {
    for (int first = 0; first + batch <= kTokens; first += batch) {
      INFO("gemv " << S.n << "x" << S.k << ": tokens " << first << ".." << first + batch << " run as a batch of "
                   << batch);
      CHECK(same_bits(all, run(first, batch), first, S.n));
    }
  }
}

template <shape::linear S>
void gemm_invariance(cuda::GemmRunner& runner) {
  std::mt19937 rng(S.n * 7 + S.k);
  const int rows = 2048;
  DeviceBuffer<uint16_t> weight(random_bf16(static_cast<size_t>(S.n) * S.k, rng, 0.05f));
  DeviceBuffer<uint16_t> in(random_bf16(static_cast<size_t>(rows) * S.k, rng));
  const size_t out_bytes = S.out == LinearOut::store_bf16 ? 2 : 4;
  auto run = [&](int first, int count) {
    DeviceBuffer<uint8_t> out(static_cast<size_t>(count) * S.n * out_bytes);
    KILN_CUDA_OK(cudaMemset(out.get(), 0, out.size()));
    runner.run(as_bf16(in) + static_cast<long long>(first) * S.k, as_bf16(weight), out.get(), count, S.n, S.k, S.out,
               nullptr);
    check_launch("cuBLASLt");
    return out.download();
  };
  const auto all = run(0, rows);
  for (const auto& [first, count] : {std::pair{0, 1}, {5, 2}, {9, 3}, {17, 5}, {40, 8}, {100, 13}, {130, 16},
                                     {300, 64}, {700, 100}, {1000, 513}, {1600, 447}}) {
    INFO("cuBLASLt " << S.n << "x" << S.k << ": rows " << first << ".." << first + count << " alone");
    CHECK(same_bits(all, run(first, count), static_cast<size_t>(first), static_cast<size_t>(S.n) * out_bytes));
  }
}

// The attention checks' prefill steps: a `len`-token sequence under test, its pages after those of
// an `other_len`-token one, and queries given as token ranges of either; q rows come from host_q
// ([len + other_len][row]: the sequence's rows, then the other's).
struct InvarianceQuery {
  bool other;
  int first, count;
};
struct InvarianceStep {
  std::vector<int> query_start = {0}, positions, tables;
  std::vector<uint16_t> rows;
  int longest = 0;
};
class TwoSequencePages {
 public:
  TwoSequencePages(int len, int other_len, int page_size)
      : len_(len), pages_((len + page_size - 1) / page_size), other_pages_((other_len + page_size - 1) / page_size),
        table_(pages_), other_table_(pages_, 0) {
    std::iota(table_.begin(), table_.end(), other_pages_);
    for (int p = 0; p < other_pages_; ++p) other_table_[p] = p;
  }
  int pages_per_seq() const { return pages_; }
  int total_pages() const { return pages_ + other_pages_; }
  InvarianceStep step(const std::vector<InvarianceQuery>& queries, const std::vector<uint16_t>& host_q, size_t row) const {
    InvarianceStep st;
    for (const InvarianceQuery& qu : queries) {
      for (int i = 0; i < qu.count; ++i) {
        st.positions.push_back(qu.first + i);
        const size_t src = static_cast<size_t>(qu.other ? len_ + qu.first + i : qu.first + i) * row;
        st.rows.insert(st.rows.end(), host_q.begin() + src, host_q.begin() + src + row);
      }
      st.query_start.push_back(st.query_start.back() + qu.count);
      const auto& t = qu.other ? other_table_ : table_;
      st.tables.insert(st.tables.end(), t.begin(), t.end());
      st.longest = std::max(st.longest, qu.count);
    }
    return st;
  }

 private:
  int len_, pages_, other_pages_;
  std::vector<int> table_, other_table_;
};

// A 300-token sequence's queries in one chunk, in parts (as chunked prefill runs them), and batched
// after another sequence: every query row comes out the same.
template <shape::attention S>
void prefill_attention_invariance() {
  static_assert(S.row == (S.heads + 2 * S.kv_heads) * S.head_dim, "q rows of fused qkv");
  constexpr int kLen = 300, kOther = 77;
  std::mt19937 rng(S.heads * 131 + S.head_dim);
  const TwoSequencePages pages(kLen, kOther, S.page_size);
  const size_t page_elems = static_cast<size_t>(2) * S.kv_heads * S.page_size * S.head_dim;
  DeviceBuffer<uint16_t> cache(random_bf16(page_elems * pages.total_pages(), rng));
  const auto host_q = random_bf16(static_cast<size_t>(kLen + kOther) * S.row, rng);
  auto run = [&](const std::vector<InvarianceQuery>& queries) {
    const InvarianceStep st = pages.step(queries, host_q, S.row);
    DeviceBuffer<uint16_t> d_rows(st.rows);
    DeviceBuffer<int> d_start(st.query_start), d_pos(st.positions), d_tables(st.tables);
    DeviceBuffer<uint16_t> out(static_cast<size_t>(st.query_start.back()) * S.heads * S.head_dim);
    out.poison();
    kiln::attention_prefill<S>(as_bf16(d_rows), as_bf16(cache), as_bf16_mut(out), d_start.get(), d_pos.get(),
                               d_tables.get(), pages.pages_per_seq(), static_cast<int>(queries.size()), st.longest,
                               nullptr);
    check_launch("attention_prefill");
    return out.download();
  };
  const size_t width = static_cast<size_t>(S.heads) * S.head_dim;
  const auto whole = run({{false, 0, kLen}});
  INFO("attention_prefill " << S.heads << "/" << S.kv_heads << "x" << S.head_dim << " page " << S.page_size);
  CHECK(same_bits(whole, run({{false, 250, 50}}), 250, width));
  CHECK(same_bits(whole, run({{false, 64, 111}}), 64, width));
  const auto batched = run({{true, 0, kOther}, {false, 200, 100}});
  CHECK(std::memcmp(whole.data() + 200 * width, batched.data() + kOther * width, 100 * width * 2) == 0);
}

// Token ranges [first, first + count) of a 1,024-token batch, run as the tokens of one step in that
// order: alone, a chunk, or a chunk batched behind others.
using TokenRanges = std::vector<std::pair<int, int>>;
const std::vector<TokenRanges> kTokenSubsets = {
    {{0, 1}}, {{5, 3}}, {{17, 64}}, {{100, 65}}, {{300, 700}}, {{900, 100}, {10, 50}}, {{1023, 1}, {0, 7}, {500, 40}}};

// Rows of `all` ([tokens][width]) that the ranges name, in their order.
template <typename T>
std::vector<T> gather_rows(const std::vector<T>& all, const TokenRanges& ranges, size_t width) {
  std::vector<T> out;
  for (const auto& [first, count] : ranges) {
    out.insert(out.end(), all.begin() + first * width, all.begin() + (first + count) * width);
  }
  return out;
}

std::string ranges_text(const TokenRanges& ranges) {
  std::string s;
  for (const auto& [first, count] : ranges) s += (s.empty() ? "" : " + ") + std::to_string(first) + ".." + std::to_string(first + count);
  return s;
}

// The routed experts of a prefill step: each token's gate | up outputs, its silu(gate) ⊙ up from the
// fused op (moe_gate_up_act) and its residual after the weighted down projections come out the
// same whatever other tokens the step holds.
template <shape::moe_gate_up G, shape::moe_down D>
void moe_prefill_invariance() {
  static_assert(G.experts == D.experts && G.top_k == D.top_k && G.hidden == D.hidden && G.inter == D.inter);
  constexpr int kTokens = 1024;
  std::mt19937 rng(G.experts * 17 + G.hidden);
  ExpertTensor gate_up(G.experts, static_cast<size_t>(2) * G.inter * G.hidden, rng, 1.0f / std::sqrt(float(G.hidden)));
  ExpertTensor down(D.experts, static_cast<size_t>(D.hidden) * D.inter, rng, 1.0f / std::sqrt(float(D.inter)));
  const auto ids = make_ids(kTokens, G.experts, G.top_k, rng);
  const auto h = random_bf16(static_cast<size_t>(kTokens) * G.hidden, rng);
  const auto act = random_bf16(static_cast<size_t>(kTokens) * G.top_k * G.inter, rng);
  std::uniform_real_distribution<float> weight_dist(0.05f, 1.0f);
  std::vector<float> weights(static_cast<size_t>(kTokens) * G.top_k);
  for (auto& w : weights) w = weight_dist(rng);
  const auto x0 = random_f32(static_cast<size_t>(kTokens) * D.hidden, rng);
  const size_t pair_row = static_cast<size_t>(2) * G.inter;

  auto run = [&](const TokenRanges& ranges) {
    const std::vector<int> t_ids = gather_rows(ids, ranges, G.top_k);
    const int tokens = static_cast<int>(t_ids.size()) / G.top_k;
    DeviceBuffer<uint16_t> d_h(gather_rows(h, ranges, G.hidden)), d_act(gather_rows(act, ranges, G.top_k * G.inter));
    DeviceBuffer<int> d_ids(t_ids), d_scratch(static_cast<size_t>(tokens) * moe_scratch_ints_per_token<G>());
    DeviceBuffer<float> d_weights(gather_rows(weights, ranges, G.top_k)), d_x(gather_rows(x0, ranges, D.hidden));
    DeviceBuffer<uint16_t> d_pairs(static_cast<size_t>(tokens) * moe_down_pair_values_per_token<D>());
    DeviceBuffer<uint16_t> d_out(static_cast<size_t>(tokens) * G.top_k * pair_row);
    DeviceBuffer<uint16_t> d_act_out(static_cast<size_t>(tokens) * G.top_k * G.inter), d_gate_up(d_out.size());
    d_scratch.poison();
    d_pairs.poison();
    d_out.poison();
    d_act_out.poison();
    constexpr shape::moe_gate_up_act A{.experts = G.experts, .top_k = G.top_k, .hidden = G.hidden, .inter = G.inter, .sms = G.sms};
    kiln::moe_gate_up_act_prefill<A>(as_bf16(d_h), as_bf16(gate_up.device), d_ids.get(), as_bf16_mut(d_gate_up),
                                     as_bf16_mut(d_act_out), d_scratch.get(), tokens, nullptr);
    kiln::moe_gate_up_prefill<G>(as_bf16(d_h), as_bf16(gate_up.device), d_ids.get(), as_bf16_mut(d_out), d_scratch.get(),
                                 tokens, nullptr);
    kiln::moe_down_prefill<D>(as_bf16(d_act), as_bf16(down.device), d_ids.get(), d_weights.get(), d_scratch.get(),
                              as_bf16_mut(d_pairs), nullptr, d_x.get(), tokens, nullptr);
    check_launch("moe prefill");
    return std::tuple{d_out.download(), d_act_out.download(), d_x.download()};
  };
  const auto [all_out, all_act, all_x] = run({{0, kTokens}});
  for (const TokenRanges& ranges : kTokenSubsets) {
    INFO("moe prefill experts " << G.experts << "/" << G.top_k << " " << G.hidden << "x" << G.inter << ": tokens "
                                << ranges_text(ranges) << " as one step");
    const auto [out, act_out, x] = run(ranges);
    CHECK(gather_rows(all_out, ranges, G.top_k * pair_row) == out);
    CHECK(gather_rows(all_act, ranges, static_cast<size_t>(G.top_k) * G.inter) == act_out);
    CHECK(std::memcmp(gather_rows(all_x, ranges, D.hidden).data(), x.data(), x.size() * sizeof(float)) == 0);
  }
}

template <shape::mla_v_up S>
void mla_v_up_invariance() {
  constexpr int kTokens = 1024;
  std::mt19937 rng(S.heads * 7 + S.latent);
  DeviceBuffer<uint16_t> w_uv(random_bf16(static_cast<size_t>(S.heads) * S.v * S.latent, rng, 0.1f));
  const auto o_lat = random_bf16(static_cast<size_t>(kTokens) * S.heads * S.latent, rng);
  const size_t in_row = static_cast<size_t>(S.heads) * S.latent, out_row = static_cast<size_t>(S.heads) * S.v;
  auto run = [&](const TokenRanges& ranges) {
    DeviceBuffer<uint16_t> d_o(gather_rows(o_lat, ranges, in_row));
    const int tokens = static_cast<int>(d_o.size() / in_row);
    DeviceBuffer<uint16_t> out(static_cast<size_t>(tokens) * out_row);
    out.poison();
    kiln::mla_v_up_prefill<S>(as_bf16(d_o), as_bf16(w_uv), as_bf16_mut(out), tokens, nullptr);
    check_launch("mla_v_up_prefill");
    return out.download();
  };
  const auto all = run({{0, kTokens}});
  for (const TokenRanges& ranges : kTokenSubsets) {
    INFO("mla_v_up_prefill heads " << S.heads << " latent " << S.latent << ": tokens " << ranges_text(ranges));
    CHECK(gather_rows(all, ranges, out_row) == run(ranges));
  }
}

// MLA attention over the latent cache: a 300-token prompt's queries in one chunk, in parts, and
// batched after another sequence give every query row the same bits.
template <shape::mla_attention S>
void mla_prefill_invariance() {
  constexpr int kLen = 300, kOther = 77, kWidth = S.latent + S.rope;
  std::mt19937 rng(S.heads * 53 + S.latent);
  const TwoSequencePages pages(kLen, kOther, S.page_size);
  DeviceBuffer<uint16_t> cache(random_bf16(static_cast<size_t>(pages.total_pages()) * S.page_size * kWidth, rng));
  const size_t q_row = static_cast<size_t>(S.heads) * kWidth, out_row = static_cast<size_t>(S.heads) * S.latent;
  const auto host_q = random_bf16((kLen + kOther) * q_row, rng, 0.5f);
  auto run = [&](const std::vector<InvarianceQuery>& queries) {
    const InvarianceStep st = pages.step(queries, host_q, q_row);
    DeviceBuffer<uint16_t> d_rows(st.rows), out(static_cast<size_t>(st.query_start.back()) * out_row);
    DeviceBuffer<int> d_start(st.query_start), d_pos(st.positions), d_tables(st.tables);
    out.poison();
    kiln::mla_attention_prefill<S>(as_bf16(d_rows), as_bf16(cache), as_bf16_mut(out), d_start.get(), d_pos.get(),
                                   d_tables.get(), pages.pages_per_seq(), static_cast<int>(queries.size()), st.longest,
                                   nullptr);
    check_launch("mla_attention_prefill");
    return out.download();
  };
  const auto whole = run({{false, 0, kLen}});
  INFO("mla_attention_prefill heads " << S.heads << " latent " << S.latent << "+" << S.rope << " page " << S.page_size);
  CHECK(same_bits(whole, run({{false, 250, 50}}), 250, out_row));
  CHECK(same_bits(whole, run({{false, 63, 111}}), 63, out_row));
  const auto batched = run({{true, 0, kOther}, {false, 200, 100}});
  CHECK(std::memcmp(whole.data() + 200 * out_row, batched.data() + kOther * out_row, 100 * out_row * 2) == 0);
}

}  // namespace

TEST_CASE("DeepSeek-V2's prefill ops give each token the same bits in any chunking and batch", "[invariance]") {
  if (!quick_run()) {  // under a sanitizer the tiny shapes stand for these (the same paths)
    moe_prefill_invariance<dsv2lite::kMoeExpertsGateUp, dsv2lite::kMoeExpertsDown>();
    mla_v_up_invariance<dsv2lite::kMlaVUp>();
    mla_prefill_invariance<dsv2lite::kMlaAttention>();
  }
  moe_prefill_invariance<tiny_ds::kMoeExpertsGateUp, tiny_ds::kMoeExpertsDown>();
  moe_prefill_invariance<tiny_ds_lite::kMoeExpertsGateUp, tiny_ds_lite::kMoeExpertsDown>();
  mla_v_up_invariance<tiny_ds::kMlaVUp>();
  mla_prefill_invariance<tiny_ds::kMlaAttention>();
}

TEST_CASE("the decode GEMV gives each token the same bits at any batch size", "[invariance]") {
  gemv_invariance<smollm2::kLinearQkvProj>();
  gemv_invariance<smollm2::kLinearOProj>();
  gemv_invariance<smollm2::kLinearGateUpProj>();
  gemv_invariance<smollm2::kLinearDownProj>();
  gemv_invariance<smollm2::kLinearLmHead>();
  gemv_invariance<qwen06::kLinearQkvProj>();
  gemv_invariance<qwen06::kLinearOProj>();
  gemv_invariance<qwen06::kLinearGateUpProj>();
  gemv_invariance<qwen06::kLinearDownProj>();
  gemv_invariance<qwen06::kLinearLmHead>();
  gemv_invariance<llama1b::kLinearQkvProj>();
  gemv_invariance<llama1b::kLinearDownProj>();
  gemv_invariance<shape::linear{.n = 200, .k = 144, .out = LinearOut::add_f32, .sms = 132}>();  // odd
  // The batched GEMV (9+ tokens, a block for every SM) at a partial row tile and a partial stage.
  gemv_invariance<shape::linear{.n = 4200, .k = 264, .out = LinearOut::store_bf16, .sms = 132}>();
}

TEST_CASE("cuBLASLt gives each row the same bits at any row count", "[invariance]") {
  cuda::GemmRunner runner;
  gemm_invariance<smollm2::kLinearQkvProj>(runner);
  gemm_invariance<smollm2::kLinearOProj>(runner);
  gemm_invariance<smollm2::kLinearGateUpProj>(runner);
  gemm_invariance<smollm2::kLinearDownProj>(runner);
  // Under a sanitizer (quick_run) SmolLM2's four layer projections stand for all: the fifteen
  // shapes take over 7 minutes there, all of it inside cuBLASLt's own kernels.
  if (quick_run()) return;
  gemm_invariance<smollm2::kLinearLmHead>(runner);
  gemm_invariance<qwen06::kLinearQkvProj>(runner);
  gemm_invariance<qwen06::kLinearOProj>(runner);
  gemm_invariance<qwen06::kLinearGateUpProj>(runner);
  gemm_invariance<qwen06::kLinearDownProj>(runner);
  gemm_invariance<qwen06::kLinearLmHead>(runner);
  gemm_invariance<llama1b::kLinearQkvProj>(runner);
  gemm_invariance<llama1b::kLinearOProj>(runner);
  gemm_invariance<llama1b::kLinearGateUpProj>(runner);
  gemm_invariance<llama1b::kLinearDownProj>(runner);
  gemm_invariance<llama1b::kLinearLmHead>(runner);
}

TEST_CASE("prefill attention gives each query the same bits in any chunking and batch", "[invariance]") {
  prefill_attention_invariance<smollm2::kAttention>();
  prefill_attention_invariance<qwen06::kAttention>();
  prefill_attention_invariance<llama1b::kAttention>();
  prefill_attention_invariance<shape::attention{.heads = 6, .kv_heads = 2, .head_dim = 48, .page_size = 5, .row = 480,
                                                .scale = 0.14433756f, .partition = 512, .max_partitions = 1}>();
}

}  // namespace kiln::kernel_test
