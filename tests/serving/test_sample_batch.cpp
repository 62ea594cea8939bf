// vLLM's logit processing in the CPU sampler (sample_batch.hpp): the edits make_logit_edits builds
// from SamplingParams, their effect on the chosen token, and the raw logprobs (chosen and top-N).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/serving/sample_batch.hpp"
#include "runtime/serving/sampler_cpu.hpp"
#include "runtime/serving/sampling_params.hpp"

using namespace kiln;

namespace {

SamplerRow greedy() { return SamplerRow{.temperature = 0.0f}; }

SampleResult run(const std::vector<float>& logits, const SamplerRow& row, std::vector<LogitEdit> edits) {
  SampleBatch batch = SampleBatch::of({row});
  batch.edits = std::move(edits);
  batch.edit_offsets = {0, static_cast<int32_t>(batch.edits.size())};
  return sample_batch_cpu(logits, static_cast<int32_t>(logits.size()), batch);
}

}  // namespace

TEST_CASE("make_logit_edits follows vLLM: bias, min_tokens bans, repetition over prompt and output, frequency and presence over output") {
  SamplingParams p;
  p.max_tokens = 10;
  p.min_tokens = 2;
  p.repetition_penalty = 1.5f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.logit_bias = {{7, 3.0f}};
  const std::vector<std::pair<int32_t, int32_t>> counts = {{4, 3}, {9, 1}};
  const std::vector<int32_t> prompt = {1, 4};
  const std::vector<int32_t> stops = {2};
  const std::vector<LogitEdit> e = make_logit_edits(p, counts, prompt, 1, stops);
  REQUIRE(e.size() == 5);  // tokens 1, 2, 4, 7, 9
  CHECK(e[0].token == 1);
  CHECK(e[0].repetition == 1.5f);
  CHECK(e[0].frequency == 0.0f);  // prompt-only: no frequency / presence (OpenAI's definition)
  CHECK(e[1].token == 2);
  CHECK(e[1].banned == 1);
  CHECK(e[2].token == 4);
  CHECK(e[2].frequency == 1.5f);
  CHECK(e[2].presence == 0.25f);
  CHECK(e[3].token == 7);
  CHECK(e[3].bias == 3.0f);
  CHECK(e[3].repetition == 1.0f);
  CHECK(e[4].token == 9);
  CHECK(e[4].frequency == 0.5f);
  // min_tokens reached: no more bans.
  for (const LogitEdit& x : make_logit_edits(p, counts, prompt, 2, stops)) CHECK(x.banned == 0);
}

TEST_CASE("apply_logit_edit divides positive logits and multiplies negative ones by the repetition penalty") {
  LogitEdit e;
  e.repetition = 2.0f;
  CHECK(apply_logit_edit(3.0f, e) == 1.5f);
  CHECK(apply_logit_edit(-3.0f, e) == -6.0f);
  e.repetition = 1.0f;
  e.bias = 1.0f;
  e.frequency = 0.5f;
  e.presence = 0.25f;
  CHECK(apply_logit_edit(1.0f, e) == 1.25f);
  e.banned = 1;
  CHECK(apply_logit_edit(100.0f, e) == kBannedLogit);
}

TEST_CASE("edits change what greedy sampling picks, and a banned token is never picked, even at high temperature") {
  const std::vector<float> logits = {1.0f, 5.0f, 4.0f, -2.0f};
  CHECK(run(logits, greedy(), {}).outputs[0].token == 1);
  CHECK(run(logits, greedy(), {LogitEdit{.token = 1, .repetition = 2.0f}}).outputs[0].token == 2);  // 5/2 < 4
  CHECK(run(logits, greedy(), {LogitEdit{.token = 3, .bias = 10.0f}}).outputs[0].token == 3);
  CHECK(run(logits, greedy(), {LogitEdit{.token = 1, .banned = 1}}).outputs[0].token == 2);
  SamplerRow hot{.temperature = 100.0f};
  for (uint64_t seed = 0; seed < 200; ++seed) {
    hot.seed = seed;
    const SampleResult r = run(logits, hot, {LogitEdit{.token = 1, .banned = 1}, LogitEdit{.token = 2, .banned = 1}});
    CHECK(r.outputs[0].status == kSampleOk);
    CHECK(r.outputs[0].token != 1);
    CHECK(r.outputs[0].token != 2);
  }
}

TEST_CASE("logprobs are the raw model's: before edits, with the top-N in order") {
  const std::vector<float> logits = {1.0f, 5.0f, 4.0f, -2.0f, 4.0f};
  SamplerRow row = greedy();
  row.want_logprob = 1;
  row.top_logprobs = 3;
  const SampleResult r = run(logits, row, {LogitEdit{.token = 1, .banned = 1}});
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x - 5.0f));
  const auto expected = [&](float x) { return static_cast<float>(static_cast<double>(x - 5.0f) - std::log(sum)); };
  REQUIRE(r.outputs[0].token == 2);  // 1 is banned; 2 and 4 tie, the lower id wins
  CHECK(r.outputs[0].logprob == Approx(expected(4.0f)).margin(1e-6));
  const auto top = r.row_top(0, 3);
  CHECK(top[0].token == 1);  // raw: the banned token is still the most likely
  CHECK(top[1].token == 2);  // ties: lower id first
  CHECK(top[2].token == 4);
  CHECK(top[0].logprob == Approx(expected(5.0f)).margin(1e-6));
  CHECK(top[2].logprob == Approx(expected(4.0f)).margin(1e-6));
}

TEST_CASE("bad_word_bans: one-token words always, a longer word's last token after the rest of it") {
  const std::vector<std::vector<int32_t>> words = {{5}, {1, 2, 3}, {2, 9}};
  CHECK(bad_word_bans(words, std::vector<int32_t>{}) == std::vector<int32_t>{5});
  CHECK(bad_word_bans(words, std::vector<int32_t>{7, 1, 2}) == std::vector<int32_t>{5, 3, 9});
  CHECK(bad_word_bans(words, std::vector<int32_t>{1, 2, 4}) == std::vector<int32_t>{5});
  CHECK(bad_word_bans(words, std::vector<int32_t>{2}) == std::vector<int32_t>{5, 9});
  SamplingParams p;
  const std::vector<int32_t> bans = {9, 3};
  const std::vector<LogitEdit> e = make_logit_edits(p, {}, {}, 0, {}, bans);
  REQUIRE(e.size() == 2);
  CHECK((e[0].token == 3 && e[0].banned && e[1].token == 9 && e[1].banned));
}

// Structured output's masks (SampleBatch::masks): a token a row's mask does not allow is banned as a
// banned edit would ban it, on top of the row's own edits; rows without a mask are untouched, and
// logprobs stay the raw model's.
TEST_CASE("a row's token mask bans what it does not allow, as banned edits would, beside unmasked rows") {
  const int32_t vocab = 300;  // not a multiple of 64: the last word is partial
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(3 * vocab);
  for (float& x : logits) x = normal(rng);
  SampleBatch masked;
  for (int r = 0; r < 3; ++r) {
    SamplerRow row{.temperature = r == 0 ? 0.0f : 1.5f, .top_p = 0.9f, .seed = 11u + static_cast<uint64_t>(r)};
    row.want_logprob = 1;
    row.top_logprobs = 4;
    masked.rows.push_back(row);
  }
  // Row 0: no mask. Row 1: eight tokens allowed. Row 2: all but every third, with its own edits.
  masked.mask_rows = {-1, 0, 1};
  masked.masks.assign(2 * token_mask_words(vocab), 0);
  const auto allow = [&](int32_t k, int32_t t) { masked.masks[k * token_mask_words(vocab) + t / 64] |= TokenMaskWord{1} << (t % 64); };
  for (int32_t t : {3, 64, 65, 127, 128, 200, 298, 299}) allow(0, t);
  for (int32_t t = 0; t < vocab; ++t) {
    if (t % 3 != 0) allow(1, t);
  }
  masked.edit_offsets = {0, 1, 1, 3};
  masked.edits = {LogitEdit{.token = 7, .bias = 50.0f}, LogitEdit{.token = 5, .bias = 40.0f},
                  LogitEdit{.token = 6, .bias = 40.0f}};
  // The same as banned edits, merged with the row's own by token.
  SampleBatch as_edits = masked;
  as_edits.masks.clear();
  as_edits.mask_rows.clear();
  as_edits.edits = {LogitEdit{.token = 7, .bias = 50.0f}};
  as_edits.edit_offsets = {0, 1};
  for (int32_t k = 0; k < 2; ++k) {
    for (int32_t t = 0; t < vocab; ++t) {
      LogitEdit e{.token = t};
      if (k == 1 && (t == 5 || t == 6)) e.bias = 40.0f;
      if (!token_allowed(masked.masks.data() + k * token_mask_words(vocab), t)) e.banned = 1;
      if (e.banned || e.bias != 0.0f) as_edits.edits.push_back(e);
    }
    as_edits.edit_offsets.push_back(static_cast<int32_t>(as_edits.edits.size()));
  }
  const SampleResult a = sample_batch_cpu(logits, vocab, masked);
  const SampleResult b = sample_batch_cpu(logits, vocab, as_edits);
  CHECK(a.outputs[0].token == 7);  // unmasked, its bias wins
  for (int r = 0; r < 3; ++r) {
    INFO("row " << r);
    CHECK(a.outputs[r].status == kSampleOk);
    CHECK(a.outputs[r].token == b.outputs[r].token);
    CHECK(a.outputs[r].logprob == b.outputs[r].logprob);
    if (r > 0) CHECK(token_allowed(masked.masks.data() + (r - 1) * token_mask_words(vocab), a.outputs[r].token));
    for (int k = 0; k < 4; ++k) CHECK(a.row_top(r, 4)[k].token == b.row_top(r, 4)[k].token);
  }
  CHECK(a.outputs[2].token != 6);  // every third token is masked, whatever its bias
  CHECK((a.outputs[2].token == 5));
  // A batch whose masks do not fit its rows is refused by name.
  SampleBatch bad = masked;
  bad.mask_rows = {0, 1};
  CHECK_THROWS_WITH(sample_batch_cpu(logits, vocab, bad), Catch::Contains("mask rows"));
  bad.mask_rows = {0, 1, 2};
  CHECK_THROWS_WITH(sample_batch_cpu(logits, vocab, bad), Catch::Contains("mask 2 of 2"));
  bad.mask_rows.clear();
  CHECK_THROWS_WITH(sample_batch_cpu(logits, vocab, bad), Catch::Contains("no mask rows"));
}
