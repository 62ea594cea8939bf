// Latencies kept as a histogram of log-spaced buckets (2% apart, 1 µs to ~2.8 h), so that a server
// that runs for days keeps percentiles in fixed memory: a quantile comes back within 2% of the
// true one (the upper edge of its bucket).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace kiln {

class LatencyHistogram {
 public:
  void add(double seconds) {
    ++counts_[bucket(seconds)];
    ++total_;
  }
  int64_t count() const { return total_; }
  // The q-quantile (0 <= q <= 1), in seconds; 0 when empty.
  double quantile(double q) const {
    if (total_ == 0) return 0.0;
    const int64_t rank = static_cast<int64_t>(std::ceil(q * static_cast<double>(total_)));
    int64_t seen = 0;
    for (int b = 0; b < kBuckets; ++b) {
      seen += counts_[b];
      if (seen >= rank && seen > 0) return upper_edge(b);
    }
    return upper_edge(kBuckets - 1);
  }

 private:
  static constexpr double kFirst = 1e-6, kRatio = 1.02;
  static constexpr int kBuckets = 1200;  // 1e-6 · 1.02^1200 ≈ 2.0e4 s
  static int bucket(double seconds) {
    if (!(seconds > kFirst)) return 0;
    const int b = static_cast<int>(std::ceil(std::log(seconds / kFirst) / std::log(kRatio)));
    return b < kBuckets ? b : kBuckets - 1;
  }
  static double upper_edge(int b) { return kFirst * std::pow(kRatio, b); }

  std::array<int64_t, kBuckets> counts_{};
  int64_t total_ = 0;
};

}  // namespace kiln
