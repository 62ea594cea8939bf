// moe_gate_up (templates/moe_gate_up.cuh) against ref::moe_gate_up: each token's chosen experts'
// gate | up rows, streaming at decode (T <= 64) and as a grouped GEMM above; moe_gate_up_prefill
// (the GEMM at every T); moe_gate_up_act (the activation in the streaming kernel) and
// moe_gate_up_act_prefill (in the GEMM's epilogue) against moe_gate_up / moe_gate_up_prefill +
// silu_mul, bit for bit.
#include "runtime/ref/moe.hpp"
#include "templates/moe_gate_up.cuh"
#include "templates/silu_mul.cuh"
#include "tests/kernels/kernel_test.hpp"
#include "tests/kernels/moe_experts.hpp"

namespace kiln::kernel_test {
namespace {

template <shape::moe_gate_up S>
void check_gate_up(const std::vector<int>& token_counts) {
  constexpr int kRows = 2 * S.inter;
  std::mt19937 rng(27000 + S.experts * S.hidden + S.inter);
  ExpertTensor gate_up(S.experts, static_cast<size_t>(kRows) * S.hidden, rng, 1.0f / std::sqrt(float(S.hidden)));
  for (int tokens : token_counts) {
    const int pairs = tokens * S.top_k;
    const auto ids = make_ids(tokens, S.experts, S.top_k, rng);
    const auto h = random_bf16(static_cast<size_t>(tokens) * S.hidden, rng);
    DeviceBuffer<uint16_t> d_h(h), d_out(static_cast<size_t>(pairs) * kRows);
    DeviceBuffer<int> d_ids(ids), d_scratch(static_cast<size_t>(tokens) * moe_scratch_ints_per_token<S>());
    std::vector<float> ref(static_cast<size_t>(pairs) * kRows);
    const auto mapped = gate_up.reference_ids(ids);
    ref::moe_gate_up(S, bf16_to_f32(h).data(), gate_up.distinct_f.data(), mapped.data(), ref.data(), tokens);
    for (const bool prefill : {false, true}) {
      d_out.poison();
      d_scratch.poison();
      (prefill ? kiln::moe_gate_up_prefill<S> : kiln::moe_gate_up<S>)(as_bf16(d_h), as_bf16(gate_up.device), d_ids.get(),
                                                                     as_bf16_mut(d_out), d_scratch.get(), tokens, nullptr);
      const std::string what = std::string(prefill ? "moe_gate_up_prefill" : "moe_gate_up") + " experts " +
                               std::to_string(S.experts) + "/" + std::to_string(S.top_k) + " " + std::to_string(S.hidden) +
                               "x" + std::to_string(S.inter) + " tokens " + std::to_string(tokens);
      check_launch(what);
      check_close(what, ref, bf16_to_f32(d_out.download()), kBf16Limit);
    }
    // The fused op against its two parts, at decode and at prefill.
    constexpr shape::moe_gate_up_act A{.experts = S.experts, .top_k = S.top_k, .hidden = S.hidden, .inter = S.inter, .sms = S.sms};
    DeviceBuffer<uint16_t> d_act_parts(static_cast<size_t>(pairs) * S.inter), d_act(static_cast<size_t>(pairs) * S.inter),
        d_gate_up(static_cast<size_t>(pairs) * kRows);
    for (const bool prefill : {false, true}) {
      d_out.poison();
      d_scratch.poison();
      (prefill ? kiln::moe_gate_up_prefill<S> : kiln::moe_gate_up<S>)(as_bf16(d_h), as_bf16(gate_up.device), d_ids.get(),
                                                                     as_bf16_mut(d_out), d_scratch.get(), tokens, nullptr);
      d_act_parts.poison();
      kiln::silu_mul<shape::silu_mul{.dim = S.inter}>(as_bf16(d_out), as_bf16_mut(d_act_parts), pairs, nullptr);
      d_act.poison();
      d_gate_up.poison();
      d_scratch.poison();
      (prefill ? kiln::moe_gate_up_act_prefill<A> : kiln::moe_gate_up_act<A>)(
          as_bf16(d_h), as_bf16(gate_up.device), d_ids.get(), as_bf16_mut(d_gate_up), as_bf16_mut(d_act),
          d_scratch.get(), tokens, nullptr);
      const std::string what = std::string(prefill ? "moe_gate_up_act_prefill" : "moe_gate_up_act") + " experts " +
                               std::to_string(S.experts) + "/" + std::to_string(S.top_k) + " " +
                               std::to_string(S.hidden) + "x" + std::to_string(S.inter) + " tokens " + std::to_string(tokens);
      check_launch(what);
      check_same_bits(what, prefill ? "moe_gate_up_prefill + silu_mul" : "moe_gate_up + silu_mul", d_act_parts.download(),
                      d_act.download());
    }
  }
  kiln::moe_gate_up<S>(nullptr, as_bf16(gate_up.device), nullptr, nullptr, nullptr, 0, nullptr);
  kiln::moe_gate_up_prefill<S>(nullptr, as_bf16(gate_up.device), nullptr, nullptr, nullptr, 0, nullptr);
  constexpr shape::moe_gate_up_act A{.experts = S.experts, .top_k = S.top_k, .hidden = S.hidden, .inter = S.inter, .sms = S.sms};
  kiln::moe_gate_up_act_prefill<A>(nullptr, as_bf16(gate_up.device), nullptr, nullptr, nullptr, nullptr, 0, nullptr);
  kiln::moe_gate_up_act<A>(nullptr, as_bf16(gate_up.device), nullptr, nullptr, nullptr, nullptr, 0, nullptr);
  check_launch("moe_gate_up, 0 tokens");
}

// launch_moe_bucket's scratch (moe_buckets.cuh) against a stable counting sort on the host: each
// expert's first slot, the pairs' count, then every expert's pairs ascending; pairs of another
// rank's experts (id -1) left out. The scratch is the size moe_gate_up's callers give it (its
// tail holds the many-block bucketing's counts).
template <int kExperts, int kTopK>
void check_buckets(int tokens, std::mt19937& rng) {
  std::vector<int> ids = make_ids(tokens, kExperts, kTopK, rng);
  for (size_t p = 3; p < ids.size(); p += 7) ids[p] = -1;
  for (size_t p = 5; p < ids.size(); p += 11) ids[p] = kExperts - 1;  // one bucket across many blocks
  std::vector<int> want(kExperts + 1, 0), placed(kExperts, 0);
  for (const int e : ids) {
    if (e >= 0) ++want[e + 1];
  }
  for (int e = 0; e < kExperts; ++e) want[e + 1] += want[e];
  want.resize(kExperts + 1 + static_cast<size_t>(want[kExperts]));
  for (int p = 0; p < static_cast<int>(ids.size()); ++p) {
    if (ids[p] >= 0) want[kExperts + 1 + want[ids[p]] + placed[ids[p]]++] = p;
  }
  DeviceBuffer<int> d_ids(ids), d_scratch(static_cast<size_t>(tokens) * (kTopK + kExperts + 1));
  d_scratch.poison();
  detail::launch_moe_bucket<kExperts, kTopK>(d_ids.get(), d_scratch.get(), tokens, nullptr);
  check_launch("moe_bucket " + std::to_string(kExperts) + " experts, " + std::to_string(tokens) + " tokens");
  std::vector<int> have = d_scratch.download();
  have.resize(want.size());
  INFO("moe_bucket " << kExperts << " experts, top " << kTopK << ", " << tokens << " tokens");
  CHECK(have == want);
}

}  // namespace

TEST_CASE("moe_bucket sorts each step's pairs by expert and keeps their order", "[moe_gate_up]") {
  std::mt19937 rng(4242);
  // One block below kBucketManyBlocksFrom pairs (341 tokens of top 6, 682 of top 3), many blocks
  // from there (342 and 683 tokens: their last block holds a few pairs).
  static_assert(detail::kBucketManyBlocksFrom == 2048 && detail::kBucketPairs == 256);
  for (const int tokens : {1, 2, 7, 64, 65, 300, 341, 342, 683, 2048, 4097}) {
    check_buckets<64, 6>(tokens, rng);   // DeepSeek-V2-Lite
    check_buckets<160, 6>(tokens, rng);  // DeepSeek-V2
    check_buckets<8, 3>(tokens, rng);    // the tiny models' and a tensor-parallel rank's few experts
  }
}

TEST_CASE("moe_gate_up multiplies each token by its chosen experts; moe_gate_up_act applies silu(gate) ⊙ up", "[moe_gate_up]") {
  // Under a sanitizer (quick_run) DeepSeek-V2-Lite's shape runs at decode sizes only (the tiny
  // shapes' 300 tokens take the grouped GEMM there) and DeepSeek-V2's (5 GB of experts) not at all:
  // in full they take over 7 minutes there.
  const std::vector<int> dsv2lite_tokens = quick_run() ? std::vector{1, 4, 64} : std::vector{1, 4, 64, 300, 2048};
  check_gate_up<dsv2lite::kMoeExpertsGateUp>(dsv2lite_tokens);
  if (!quick_run()) {
    check_gate_up<shape::moe_gate_up{.experts = 160, .top_k = 6, .hidden = 5120, .inter = 1536, .sms = 132}>({1, 64});  // DeepSeek-V2
    // The streaming kernel's other column splits (moe_stream_splits), from more SMs than 132: 4 at 300, 8 at 1,000.
    constexpr shape::moe_gate_up kLite = dsv2lite::kMoeExpertsGateUp;
    static_assert(detail::moe_stream_splits(2 * kLite.inter, kLite.hidden, kLite.top_k, kLite.experts, kLite.sms) == 2);
    static_assert(detail::moe_stream_splits(2 * kLite.inter, kLite.hidden, kLite.top_k, kLite.experts, 300) == 4);
    static_assert(detail::moe_stream_splits(2 * kLite.inter, kLite.hidden, kLite.top_k, kLite.experts, 1000) == 8);
    check_gate_up<shape::moe_gate_up{.experts = kLite.experts, .top_k = kLite.top_k, .hidden = kLite.hidden,
                                     .inter = kLite.inter, .sms = 300}>({1, 9, 64});
    check_gate_up<shape::moe_gate_up{.experts = kLite.experts, .top_k = kLite.top_k, .hidden = kLite.hidden,
                                     .inter = kLite.inter, .sms = 1000}>({1, 9});
  }
  check_gate_up<tiny_ds::kMoeExpertsGateUp>({1, 4, 64, 65, 300});
  check_gate_up<tiny_ds_lite::kMoeExpertsGateUp>({1, 4, 64, 65, 300});
  check_gate_up<shape::moe_gate_up{.experts = 5, .top_k = 2, .hidden = 36, .inter = 10, .sms = 132}>({1, 65});  // 4-element rows
}

}  // namespace kiln::kernel_test
