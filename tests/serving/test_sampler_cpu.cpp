#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/serving/sampler_cpu.hpp"
#include "runtime/serving/sampling_params.hpp"

using namespace kiln;

namespace {

SamplerRow sampling_row(float temperature, int32_t top_k, float top_p, float min_p, uint64_t seed = 1234,
                        uint64_t counter = 0) {
  SamplerRow row;
  row.temperature = temperature;
  row.top_k = top_k;
  row.top_p = top_p;
  row.min_p = min_p;
  row.seed = seed;
  row.counter = counter;
  return row;
}

// The filtered, renormalized distribution, computed independently in double precision from the
// textbook definitions (softmax with temperature; top-k, top-p on the full distribution, min-p
// relative to the top probability; keep the intersection).
std::vector<double> expected_distribution(const std::vector<float>& logits, const SamplerRow& row) {
  const size_t vocab = logits.size();
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(vocab);
  double sum = 0;
  for (size_t i = 0; i < vocab; ++i) sum += p[i] = std::exp((logits[i] - max_logit) / row.temperature);
  for (double& v : p) v /= sum;
  std::vector<size_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  const double p_max = p[order[0]];

  double kth = 0, tau = 0;
  if (row.top_k > 0 && static_cast<size_t>(row.top_k) < vocab) kth = p[order[row.top_k - 1]];
  if (row.top_p < 1.0f) {
    double cumulative = 0;
    for (size_t idx : order) {
      cumulative += p[idx];
      if (cumulative >= row.top_p) {
        tau = p[idx];
        break;
      }
    }
  }
  std::vector<double> kept(vocab, 0.0);
  double kept_sum = 0;
  for (size_t i = 0; i < vocab; ++i) {
    if (p[i] >= kth && p[i] >= tau && p[i] >= row.min_p * p_max) kept_sum += kept[i] = p[i];
  }
  for (double& v : kept) v /= kept_sum;
  return kept;
}

// Wilson-Hilferty approximation of the chi-square quantile at 1 - 1e-4.
double chi_square_critical(int df) {
  const double z = 3.719;
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

}  // namespace

TEST_CASE("sampling_exp is exact at 0 and accurate below and zero past e to the -80") {
  CHECK(sampling_exp(0.0f) == 1.0f);
  CHECK(sampling_exp(-80.5f) == 0.0f);
  CHECK(sampling_exp(-std::numeric_limits<float>::infinity()) == 0.0f);
  double worst = 0;
  for (float d = -79.99f; d <= 0.0f; d += 0.00731f) {
    const double exact = std::exp(static_cast<double>(d));
    worst = std::max(worst, std::abs(sampling_exp(d) - exact) / exact);
  }
  CHECK(worst < 5e-7);
}

TEST_CASE("key_mass is floor(weight * 2^40)") {
  CHECK(weight_mass(1.0f) == (uint64_t{1} << 40));
  CHECK(weight_mass(0.0f) == 0);
  CHECK(weight_mass(0.5f) == (uint64_t{1} << 39));
  CHECK(weight_mass(std::ldexp(1.0f, -41)) == 0);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> exponent(-60.0f, 0.0f);
  for (int i = 0; i < 10000; ++i) {
    const float w = sampling_exp(exponent(rng));
    const long double exact = std::floor(static_cast<long double>(w) * 1099511627776.0L);
    REQUIRE(weight_mass(w) == static_cast<uint64_t>(exact));
  }
}

TEST_CASE("greedy picks the argmax with the lowest id on ties and ignores the filters") {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f};
  CHECK(sample_row_cpu(logits, sampling_row(0.0f, 0, 1.0f, 0.0f)).token == 1);
  CHECK(sample_row_cpu(logits, sampling_row(0.0f, 3, 0.5f, 0.5f)).token == 1);
  CHECK(sample_row_cpu(logits, sampling_row(1e-6f, 0, 1.0f, 0.0f)).token == 1);  // below kGreedyTemperature
  const std::vector<float> last = {-5.0f, -4.0f, 7.5f};
  CHECK(sample_row_cpu(last, sampling_row(0.0f, 0, 1.0f, 0.0f)).token == 2);
}

TEST_CASE("NaN or infinite logits fail that row only") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {0.5f, 1.0f, 0.0f,   // fine
                                     0.5f, nan, 0.0f,    // NaN
                                     inf, 1.0f, 0.0f,    // +inf
                                     0.5f, 1.0f, -inf,   // -inf
                                     2.0f, 1.0f, 0.0f};  // fine
  const std::vector<SamplerRow> rows(5, sampling_row(1.0f, 0, 1.0f, 0.0f));
  std::vector<SamplerRow> greedy = rows;
  greedy[0].temperature = greedy[4].temperature = 0.0f;
  for (const auto& batch : {rows, greedy}) {
    const std::vector<SampleOutput> out = sample_cpu(logits, 3, batch);
    REQUIRE(out.size() == 5);
    CHECK(out[0].status == kSampleOk);
    CHECK(out[1].status == kSampleBadLogits);
    CHECK(out[1].token == -1);
    CHECK(out[2].status == kSampleBadLogits);
    CHECK(out[3].status == kSampleBadLogits);
    CHECK(out[4].status == kSampleOk);
  }
  CHECK(sample_cpu(logits, 3, greedy)[4].token == 0);
}

TEST_CASE("a row's token depends on its seed and counter and not on the batch around it") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int32_t vocab = 300;
  std::vector<float> mine(vocab), other(vocab);
  for (float& v : mine) v = normal(rng);
  for (float& v : other) v = normal(rng);
  const SamplerRow row = sampling_row(0.8f, 40, 0.9f, 0.01f, 777, 5);
  const int32_t alone = sample_row_cpu(mine, row).token;

  std::vector<float> batch;
  batch.insert(batch.end(), other.begin(), other.end());
  batch.insert(batch.end(), mine.begin(), mine.end());
  batch.insert(batch.end(), other.begin(), other.end());
  const std::vector<SamplerRow> rows = {sampling_row(1.0f, 0, 1.0f, 0.0f, 1, 0), row,
                                        sampling_row(0.5f, 5, 1.0f, 0.0f, 2, 9)};
  CHECK(sample_cpu(batch, vocab, rows)[1].token == alone);
  // First in a batch of two as well: the row's index in the batch does not enter its draw.
  std::vector<float> first(mine);
  first.insert(first.end(), other.begin(), other.end());
  CHECK(sample_cpu(first, vocab, std::vector<SamplerRow>{row, rows[2]})[0].token == alone);

  // Different counters (later tokens of the same request) and seeds spread over the kept set.
  std::vector<int32_t> seen;
  for (uint64_t counter = 0; counter < 200; ++counter) {
    seen.push_back(sample_row_cpu(mine, sampling_row(0.8f, 40, 0.9f, 0.01f, 777, counter)).token);
  }
  std::sort(seen.begin(), seen.end());
  CHECK(std::unique(seen.begin(), seen.end()) - seen.begin() > 5);
}

TEST_CASE("empirical frequencies match the filtered and renormalized distribution") {
  const std::vector<float> logits = {2.0f, 1.5f, 1.2f, 0.7f, 0.3f, -0.1f, -0.8f, -1.5f};
  struct Case {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    size_t expected_kept;
  };
  const std::vector<Case> cases = {
      {1.0f, 0, 1.0f, 0.0f, 8},    // temperature only
      {0.7f, 4, 1.0f, 0.0f, 4},    // top-k
      {1.3f, 0, 0.8f, 0.0f, 5},    // top-p
      {1.0f, 0, 1.0f, 0.2f, 4},    // min-p
      {0.9f, 6, 0.9f, 0.05f, 5},   // top-p binds in the intersection
      {2.0f, 0, 0.5f, 0.0f, 3},    // hot temperature, top-p
      {0.5f, 3, 0.95f, 0.1f, 3},   // top-k and min-p bind
      {1.0f, 9, 1.0f, 0.0f, 8},    // top_k > V is off
  };
  const int draws = 200000;
  for (const Case& c : cases) {
    const SamplerRow base = sampling_row(c.temperature, c.top_k, c.top_p, c.min_p, 20240601);
    const std::vector<double> expected = expected_distribution(logits, base);
    const auto kept = static_cast<size_t>(std::count_if(expected.begin(), expected.end(), [](double p) { return p > 0; }));
    INFO("temperature " << c.temperature << " top_k " << c.top_k << " top_p " << c.top_p << " min_p " << c.min_p);
    REQUIRE(kept == c.expected_kept);

    std::vector<int> counts(logits.size(), 0);
    SamplerRow row = base;
    for (int i = 0; i < draws; ++i) {
      row.counter = static_cast<uint64_t>(i);
      const SampleOutput out = sample_row_cpu(logits, row);
      REQUIRE(out.status == kSampleOk);
      ++counts[out.token];
    }
    double chi2 = 0;
    for (size_t t = 0; t < logits.size(); ++t) {
      if (expected[t] == 0) {
        CHECK(counts[t] == 0);  // nothing outside the kept set, ever
        continue;
      }
      const double e = expected[t] * draws;
      chi2 += (counts[t] - e) * (counts[t] - e) / e;
    }
    const int df = static_cast<int>(kept) - 1;
    INFO("chi-square " << chi2 << " with " << df << " degrees of freedom");
    if (df > 0) CHECK(chi2 < chi_square_critical(df));
  }
}

TEST_CASE("tokens tied at the top-k or top-p threshold are all kept") {
  // Three tokens share the top probability 0.2854; 0.3 of the mass is reached inside the tie.
  const std::vector<float> logits = {1.0f, 1.0f, 0.0f, 1.0f, -1.0f};
  for (const SamplerRow& row : {sampling_row(1.0f, 0, 0.3f, 0.0f), sampling_row(1.0f, 2, 1.0f, 0.0f)}) {
    std::vector<int> counts(logits.size(), 0);
    SamplerRow r = row;
    for (int i = 0; i < 3000; ++i) {
      r.counter = static_cast<uint64_t>(i);
      SampleTrace trace;
      ++counts[sample_row_cpu(logits, r, &trace).token];
      REQUIRE(trace.threshold_key == float_bits(1.0f));
      REQUIRE(trace.kept_mass == 3 * (uint64_t{1} << 40));
    }
    CHECK(counts[0] > 900);
    CHECK(counts[1] > 900);
    CHECK(counts[3] > 900);
    CHECK(counts[2] == 0);
    CHECK(counts[4] == 0);
  }
}

TEST_CASE("top_p near 0 and top_k = 1 keep only the top token while top_p = 1 and top_k = 0 filter nothing") {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> logits(1000);
  for (float& v : logits) v = normal(rng);
  const auto argmax = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  for (uint64_t counter = 0; counter < 50; ++counter) {
    CHECK(sample_row_cpu(logits, sampling_row(1.0f, 0, 1e-7f, 0.0f, 9, counter)).token == argmax);
    CHECK(sample_row_cpu(logits, sampling_row(1.5f, 1, 1.0f, 0.0f, 9, counter)).token == argmax);
    // Off filters are the same as no filters at all.
    const int32_t plain = sample_row_cpu(logits, sampling_row(1.0f, 0, 1.0f, 0.0f, 9, counter)).token;
    CHECK(sample_row_cpu(logits, sampling_row(1.0f, 1000, 1.0f, 0.0f, 9, counter)).token == plain);
    CHECK(sample_row_cpu(logits, sampling_row(1.0f, 5000, 1.0f, 0.0f, 9, counter)).token == plain);
  }
}

TEST_CASE("the draw is an inverse CDF over kept mass in token-id order") {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(5000);
  for (float& v : logits) v = normal(rng);
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  for (uint64_t counter = 0; counter < 20; ++counter) {
    const SamplerRow row = sampling_row(0.9f, 200, 0.8f, 0.001f, 31337, counter);
    SampleTrace trace;
    const int32_t token = sample_row_cpu(logits, row, &trace).token;
    uint64_t before = 0, kept = 0, total = 0;
    size_t kept_count = 0;
    for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) {
      const uint32_t key = float_bits(sampling_weight(logits[i], max_logit, 1.0f / row.temperature));
      total += key_mass(key);
      if (key < trace.threshold_key) continue;
      ++kept_count;
      kept += key_mass(key);
      if (i < token) before += key_mass(key);
    }
    CHECK(kept_count <= 200);  // top-k bounds the set (no ties among normal draws)
    CHECK(trace.total_mass == total);
    CHECK(trace.kept_mass == kept);
    CHECK(trace.mass_before == before);
    CHECK(trace.mass_before <= trace.target);
    CHECK(trace.target < trace.mass_through);
    CHECK(trace.target == sample_target(philox_random64(31337, counter), kept));
  }
}

TEST_CASE("the kept-set threshold equals the sorted-keys definition on rows with ties, large and small") {
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::vector<SamplerRow> params = {
      sampling_row(1.0f, 50, 1.0f, 0.0f),  sampling_row(0.7f, 0, 0.9f, 0.0f),   sampling_row(1.2f, 300, 0.8f, 0.01f),
      sampling_row(0.5f, 0, 0.5f, 0.2f),   sampling_row(2.0f, 2999, 0.999f, 0), sampling_row(1.0f, 7, 0.3f, 0.0f),
  };
  // 3000 tokens: the threshold is found through a histogram of the keys; 600: by sorting them all.
  for (int trial = 0; trial < 24; ++trial) {
    std::vector<float> logits(trial < 12 ? 3000 : 600);
    for (float& v : logits) v = normal(rng) * (trial % 3 == 0 ? 4.0f : 1.0f);
    if (trial % 2 == 1) {
      for (float& v : logits) v = std::round(v * 3.0f) / 3.0f;  // heavy ties
    }
    const float max_logit = *std::max_element(logits.begin(), logits.end());
    for (const SamplerRow& row : params) {
      std::vector<uint32_t> keys;
      uint64_t total = 0;
      for (float v : logits) {
        keys.push_back(float_bits(sampling_weight(v, max_logit, 1.0f / row.temperature)));
        total += key_mass(keys.back());
      }
      std::vector<uint32_t> sorted = keys;
      std::sort(sorted.begin(), sorted.end(), std::greater<>());
      uint32_t expected = min_p_threshold(row);
      if (row.top_k > 0 && row.top_k < static_cast<int32_t>(keys.size())) {
        expected = std::max(expected, sorted[row.top_k - 1]);
      }
      if (row.top_p < 1.0f) {
        const uint64_t required = top_p_required_mass(row.top_p, total);
        uint64_t mass = 0;
        for (size_t i = 0; i < sorted.size(); ++i) {
          mass += key_mass(sorted[i]);
          if (mass >= required && (i + 1 == sorted.size() || sorted[i + 1] != sorted[i])) {
            expected = std::max(expected, sorted[i]);
            break;
          }
        }
      }
      SampleTrace trace;
      sample_row_cpu(logits, row, &trace);
      INFO("trial " << trial << " top_k " << row.top_k << " top_p " << row.top_p << " min_p " << row.min_p);
      CHECK(trace.threshold_key == expected);
      CHECK(trace.total_mass == total);
    }
  }
}

TEST_CASE("logprob is the raw log-softmax of the chosen token") {
  const std::vector<float> logits = {0.25f, -1.0f, 2.0f, 0.5f};
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - 2.0);
  SamplerRow row = sampling_row(0.7f, 0, 1.0f, 0.0f, 5, 0);
  row.want_logprob = 1;
  for (uint64_t counter = 0; counter < 20; ++counter) {
    row.counter = counter;
    const SampleOutput out = sample_row_cpu(logits, row);
    CHECK(out.logprob == Approx(logits[out.token] - 2.0 - std::log(sum)).margin(1e-6));
  }
  row.temperature = 0.0f;
  CHECK(sample_row_cpu(logits, row).logprob == Approx(-std::log(sum)).margin(1e-6));
}

TEST_CASE("sampler inputs are checked") {
  const std::vector<float> logits(6, 0.0f);
  const std::vector<SamplerRow> rows(4);
  CHECK_THROWS_WITH(sample_cpu(logits, 3, rows), Catch::Contains("expected 4 rows x 3 tokens"));
  CHECK_THROWS_AS(sample_row_cpu(std::span<const float>(), SamplerRow{}), Error);
}

TEST_CASE("SamplingParams::validate names the field and its range") {
  const auto message = [](auto change) {
    SamplingParams p;
    change(p);
    try {
      p.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("valid");
  };
  CHECK(message([](SamplingParams&) {}) == "valid");
  CHECK_THAT(message([](SamplingParams& p) { p.temperature = -0.5f; }), Catch::Contains("temperature = -0.5"));
  CHECK_THAT(message([](SamplingParams& p) { p.temperature = NAN; }), Catch::Contains("temperature"));
  CHECK_THAT(message([](SamplingParams& p) { p.top_k = -1; }), Catch::Contains("top_k = -1: expected >= 0"));
  CHECK_THAT(message([](SamplingParams& p) { p.top_p = 0.0f; }), Catch::Contains("top_p = 0: expected a value in (0, 1]"));
  CHECK_THAT(message([](SamplingParams& p) { p.top_p = 1.5f; }), Catch::Contains("top_p = 1.5"));
  CHECK_THAT(message([](SamplingParams& p) { p.min_p = 1.0f; }), Catch::Contains("min_p = 1: expected a value in [0, 1)"));
  CHECK_THAT(message([](SamplingParams& p) { p.max_tokens = 0; }), Catch::Contains("max_tokens = 0: expected > 0"));
  CHECK_THAT(message([](SamplingParams& p) { p.stop_token_ids = {3, -2}; }), Catch::Contains("stop_token_ids[1] = -2"));
  CHECK_THAT(message([](SamplingParams& p) { p.stop = {"a", ""}; }), Catch::Contains("stop[1] is empty"));
  // Stop strings: kMaxStopStrings of them, kMaxStopBytes in all (each is copied into every choice).
  CHECK(message([](SamplingParams& p) { p.stop.assign(kMaxStopStrings, "ab"); }) == "valid");
  CHECK_THAT(message([](SamplingParams& p) { p.stop.assign(kMaxStopStrings + 1, "ab"); }),
             Catch::Contains("stop holds 1025 strings: expected at most 1024"));
  CHECK(message([](SamplingParams& p) { p.stop = {std::string(kMaxStopBytes, 'a')}; }) == "valid");
  CHECK_THAT(message([](SamplingParams& p) { p.stop = {std::string(kMaxStopBytes, 'a'), "b"}; }),
             Catch::Contains("stop holds 65537 bytes of strings: expected at most 65536 in all"));
}

TEST_CASE("requests without a seed get distinct seeds") {
  std::vector<uint64_t> seeds;
  for (int i = 0; i < 1000; ++i) seeds.push_back(draw_request_seed());
  std::sort(seeds.begin(), seeds.end());
  CHECK(std::unique(seeds.begin(), seeds.end()) == seeds.end());
}
