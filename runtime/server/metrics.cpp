#include "runtime/server/metrics.hpp"

#include <algorithm>
#include <cstdio>
#include <tuple>

namespace kiln {

namespace {

std::string number(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  return buffer;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double value) {
  out += name + "{" + labels + "} " + number(value) + "\n";
}

// vLLM's buckets, with finer ones below 10 ms: kiln's CPU backend runs tiny models in microseconds.
const std::vector<double> kTtftBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                          0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
                                         0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBuckets = {0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                                         30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Histogram::write(std::string& out, const std::string& name, const std::string& labels) const {
  int64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum{" + labels + "} " + number(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics(std::string model_name)
    : labels_("model_name=\"" + model_name + "\""), ttft_(kTtftBuckets), inter_token_(kItlBuckets), e2e_(kE2eBuckets) {}

void ServerMetrics::set_gauges(const MetricsGauges& gauges) {
  std::lock_guard lock(mutex_);
  gauges_ = gauges;
}

MetricsGauges ServerMetrics::gauges() const {
  std::lock_guard lock(mutex_);
  return gauges_;
}

void ServerMetrics::add_step(int64_t steps) {
  std::lock_guard lock(mutex_);
  steps_ += steps;
}

void ServerMetrics::add_generation_tokens(int64_t n) {
  std::lock_guard lock(mutex_);
  generation_tokens_ += n;
}

void ServerMetrics::add_finished(const std::string& finish_reason, int64_t prompt_tokens, int64_t cached_prompt_tokens,
                                 int64_t generation_tokens, double e2e_seconds, int32_t preemptions) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += prompt_tokens;
  prefix_queries_ += prompt_tokens;
  prefix_hits_ += cached_prompt_tokens;
  preemptions_ += preemptions;
  ++success_[finish_reason];
  e2e_.observe(e2e_seconds);
  (void)generation_tokens;  // counted per token as they are generated (add_generation_tokens)
}

void ServerMetrics::observe_ttft(double seconds) {
  std::lock_guard lock(mutex_);
  ttft_.observe(seconds);
}

void ServerMetrics::observe_inter_token(double seconds) {
  std::lock_guard lock(mutex_);
  inter_token_.observe(seconds);
}

void ServerMetrics::add_rejected() {
  std::lock_guard lock(mutex_);
  ++rejected_;
}

int64_t ServerMetrics::generation_tokens() const {
  std::lock_guard lock(mutex_);
  return generation_tokens_;
}

int64_t ServerMetrics::prompt_tokens() const {
  std::lock_guard lock(mutex_);
  return prompt_tokens_;
}

std::string ServerMetrics::text() const {
  std::lock_guard lock(mutex_);
  std::string out;
  const std::string& l = labels_;
  // Single-sample metrics: name, type, help, value.
  const std::tuple<const char*, const char*, const char*, double> scalars[] = {
      {"kiln:num_requests_running", "gauge", "Number of requests in model execution batches.", gauges_.running},
      {"kiln:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", gauges_.waiting},
      {"kiln:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", gauges_.kv_cache_usage},
      {"kiln:kv_cache_pages_in_use", "gauge", "KV-cache pages held by unfinished requests.", gauges_.kv_pages_in_use},
      {"kiln:kv_cache_pages", "gauge", "KV-cache pages in the pool.", gauges_.kv_pages},
      {"kiln:prompt_tokens_total", "counter", "Number of prefill tokens processed (of finished requests).", prompt_tokens_},
      {"kiln:generation_tokens_total", "counter", "Number of generation tokens processed.", generation_tokens_},
      {"kiln:prefix_cache_queries_total", "counter", "Prefix-cache queries, in prompt tokens.", prefix_queries_},
      {"kiln:prefix_cache_hits_total", "counter", "Prefix-cache hits, in prompt tokens.", prefix_hits_},
      {"kiln:num_preemptions_total", "counter", "Cumulative number of preemptions.", preemptions_},
      {"kiln:engine_steps_total", "counter", "Forward steps the engine ran.", steps_},
      {"kiln:request_rejected_total", "counter", "Requests refused with 503 because the waiting queue was full.", rejected_},
  };
  for (const auto& [name, type, help, value] : scalars) {
    header(out, name, type, help);
    sample(out, name, l, value);
  }
  header(out, "kiln:request_success_total", "counter", "Count of finished requests, by finish reason.");
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    const auto it = success_.find(reason);
    sample(out, "kiln:request_success_total", l + ",finished_reason=\"" + reason + "\"",
           it == success_.end() ? 0.0 : static_cast<double>(it->second));
  }
  header(out, "kiln:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.");
  ttft_.write(out, "kiln:time_to_first_token_seconds", l);
  header(out, "kiln:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.");
  inter_token_.write(out, "kiln:inter_token_latency_seconds", l);
  header(out, "kiln:e2e_request_latency_seconds", "histogram", "Histogram of end-to-end request latency in seconds.");
  e2e_.write(out, "kiln:e2e_request_latency_seconds", l);
  return out;
}

}  // namespace kiln
