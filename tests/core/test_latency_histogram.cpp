#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "runtime/core/latency_histogram.hpp"

using kiln::LatencyHistogram;

TEST_CASE("latency quantiles come back within 2% of the exact ones, in fixed memory") {
  std::mt19937 rng(3);
  std::lognormal_distribution<double> latency(std::log(0.005), 1.0);  // ~5 ms, a long tail
  LatencyHistogram h;
  std::vector<double> all;
  for (int i = 0; i < 100000; ++i) {
    const double v = latency(rng);
    h.add(v);
    all.push_back(v);
  }
  std::sort(all.begin(), all.end());
  CHECK(h.count() == 100000);
  for (double q : {0.5, 0.9, 0.99, 1.0}) {
    const double exact = all[static_cast<size_t>(std::ceil(q * all.size())) - 1];
    INFO("q " << q << ": " << h.quantile(q) << " s, exact " << exact << " s");
    CHECK(h.quantile(q) >= exact);
    CHECK(h.quantile(q) <= exact * 1.0201);
  }
}

TEST_CASE("latency histogram edges: empty, below the first bucket, past the last") {
  LatencyHistogram h;
  CHECK(h.quantile(0.5) == 0.0);
  h.add(0.0);
  h.add(-1.0);
  CHECK(h.quantile(1.0) == Approx(1e-6));  // clamped into the first bucket
  h.add(1e9);
  CHECK(h.quantile(1.0) > 1e4);  // the last bucket holds everything past it
  CHECK(h.count() == 3);
}
