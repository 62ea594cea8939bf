// What a run reports: the JSON document of --output-format json, the JSONL lines of --output, the
// summary at the end, and a progress bar for long batch runs.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/cli/requests.hpp"
#include "runtime/engine/engine.hpp"

namespace kiln {

// One request's outcome, in job order.
struct JobResult {
  const PromptJob* job = nullptr;
  const FinishedRequest* finished = nullptr;  // null when the job failed before running
  std::string text;                           // decoded output (empty without a tokenizer)
  std::vector<PromptTokenLogprob> prompt_logprobs;  // when the request asked for them
};

struct RunReport {
  const ModelInfo* model = nullptr;
  const Backend* backend = nullptr;
  const EngineStats* stats = nullptr;
  std::vector<JobResult> results;
};

nlohmann::json result_json(const JobResult& r);
nlohmann::json report_json(const RunReport& report);
std::string summary_text(const RunReport& report);

// A one-line bar on stderr, redrawn at most ten times a second.
class ProgressBar {
 public:
  ProgressBar(int64_t total, bool enabled);
  void update(int64_t done, int64_t output_tokens);
  void finish();

 private:
  int64_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace kiln
