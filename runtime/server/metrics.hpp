// The server's Prometheus metrics (GET /metrics, text format 0.0.4), named as vLLM names them
// under the prefix "kiln:" (kiln:num_requests_running, kiln:prompt_tokens_total,
// kiln:time_to_first_token_seconds, ...), so vLLM dashboards need only the prefix changed.
// Updated by the engine loop, read by the HTTP threads: every method is thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kiln {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // The metric's lines: name_bucket{le=...}, name_sum, name_count, with `labels` ("k=\"v\"").
  void write(std::string& out, const std::string& name, const std::string& labels) const;
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative); the last is +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

struct MetricsGauges {
  int32_t running = 0, waiting = 0;
  double kv_cache_usage = 0;  // pages in use / all pages, in [0, 1]
  int32_t kv_pages_in_use = 0, kv_pages = 0;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  void set_gauges(const MetricsGauges& gauges);
  MetricsGauges gauges() const;
  void add_step(int64_t steps = 1);
  void add_generation_tokens(int64_t n);
  // A finished request: its accounting and latencies.
  void add_finished(const std::string& finish_reason, int64_t prompt_tokens, int64_t cached_prompt_tokens,
                    int64_t generation_tokens, double e2e_seconds, int32_t preemptions);
  void observe_ttft(double seconds);
  void observe_inter_token(double seconds);
  void add_rejected();  // 503: the waiting queue was full

  int64_t generation_tokens() const;
  int64_t prompt_tokens() const;
  std::string text() const;  // the /metrics body

 private:
  mutable std::mutex mutex_;
  std::string labels_;
  MetricsGauges gauges_;
  int64_t steps_ = 0, prompt_tokens_ = 0, generation_tokens_ = 0, prefix_queries_ = 0, prefix_hits_ = 0;
  int64_t preemptions_ = 0, rejected_ = 0;
  std::map<std::string, int64_t> success_;  // by finish reason
  Histogram ttft_, inter_token_, e2e_;
};

}  // namespace kiln
