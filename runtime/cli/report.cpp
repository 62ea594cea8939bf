#include "runtime/cli/report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace kiln {

using nlohmann::json;

namespace {

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::min<double>(v.size() - 1, p * (v.size() - 1) + 0.5))];
}

}  // namespace

json result_json(const JobResult& r) {
  json j;
  if (r.job->line > 0) j["line"] = r.job->line;
  if (!r.job->user_id.empty()) j["id"] = r.job->user_id;
  if (!r.finished) {
    j["error"] = r.job->error;
    return j;
  }
  const FinishedRequest& f = *r.finished;
  j["prompt_ids"] = r.job->request.prompt;
  j["prompt_tokens"] = f.num_prompt_tokens;
  j["cached_prompt_tokens"] = f.num_cached_prompt_tokens;
  j["output_ids"] = f.output_tokens;
  j["text"] = r.text;
  j["finish_reason"] = std::string(finish_reason_name(f.reason));
  j["preemptions"] = f.num_preemptions;
  j["first_token_ms"] = 1e3 * f.first_token_seconds;  // from the start of the run (queueing included)
  j["finish_ms"] = 1e3 * f.finish_seconds;
  if (!f.logprobs.empty()) j["logprobs"] = f.logprobs;
  if (r.job->request.params.prompt_logprobs) {
    json p = json::array();
    for (const PromptTokenLogprob& e : r.prompt_logprobs) {
      json top = json::array();
      for (const TokenLogprob& t : e.top) top.push_back({{"id", t.token}, {"logprob", t.logprob}});
      p.push_back({{"id", e.token}, {"logprob", e.logprob}, {"top", top}});
    }
    j["prompt_logprobs"] = p;  // prompt tokens 1.. (the first has nothing before it)
  }
  return j;
}

json report_json(const RunReport& rep) {
  const EngineStats& s = *rep.stats;
  const BackendInfo& b = rep.backend->info();
  const int64_t decode_tokens = s.scheduler.decode_tokens;
  json j;
  j["model"] = rep.model->name;
  j["backend"] = rep.backend->name();
  j["device"] = b.device;
  j["requests"] = json::array();
  for (const JobResult& r : rep.results) j["requests"].push_back(result_json(r));
  j["counts"] = {{"prompts", rep.results.size()},
                 {"prompt_tokens", s.prompt_tokens},
                 {"cached_prompt_tokens", s.cached_prompt_tokens},
                 {"output_tokens", s.output_tokens},
                 {"steps", s.steps},
                 {"prefill_steps", s.prefill_steps},
                 {"decode_steps", s.decode_steps},
                 {"preemptions", s.scheduler.preemptions},
                 {"swapped_out", s.scheduler.swapped_out},
                 {"swap_out_pages", s.scheduler.swap_out_pages},
                 {"swap_in_pages", s.scheduler.swap_in_pages}};
  j["timings"] = {{"load_s", b.load_seconds},
                  {"wall_s", s.wall_seconds},
                  {"prefill_s", s.prefill_seconds},
                  {"decode_s", s.decode_seconds},
                  {"ttft_ms_mean", 1e3 * mean(s.ttft_seconds)},
                  {"ttft_ms_p50", 1e3 * percentile(s.ttft_seconds, 0.5)},
                  {"ttft_ms_p99", 1e3 * percentile(s.ttft_seconds, 0.99)},
                  {"prefill_tok_s", s.prefill_seconds > 0 ? s.scheduler.prefill_tokens / s.prefill_seconds : 0.0},
                  {"decode_tok_s", s.decode_seconds > 0 ? decode_tokens / s.decode_seconds : 0.0},
                  {"decode_ms_per_step", s.decode_steps > 0 ? 1e3 * s.decode_seconds / s.decode_steps : 0.0},
                  // Between a request's consecutive tokens: the whole steps that made them.
                  {"itl_ms_p50", 1e3 * s.itl.quantile(0.5)},
                  {"itl_ms_p99", 1e3 * s.itl.quantile(0.99)},
                  {"itl_ms_max", 1e3 * s.itl.quantile(1.0)}};
  const double steps = static_cast<double>(std::max<int64_t>(1, s.decode_steps));
  // MoE models count the routed experts only under --profile; without it the bytes leave them out
  // (routed_experts_read is null).
  const bool moe = rep.model->num_routed_experts > 0;
  j["decode_bytes_per_step"] = {
      {"weights", s.decode_weight_bytes / steps},
      {"kv_cache", s.decode_kv_bytes / steps},
      {"total", (s.decode_weight_bytes + s.decode_kv_bytes) / steps},
      {"per_gpu", s.decode_gpu_bytes / steps},
      {"routed_experts_read", moe && !s.experts_counted ? nlohmann::json() : nlohmann::json(s.decode_experts_read / steps)}};
  // --profile on the whole-step decode kernel: per stage family, ms and GB/s of a step.
  if (const StepProfile* p = b.step_profile; p != nullptr && p->steps() > 0) {
    const double n = static_cast<double>(p->steps());
    j["decode_stages"] = json::array();
    for (const StageTiming& t : p->stages()) {
      j["decode_stages"].push_back({{"stage", t.name},
                                    {"ms_per_step", 1e3 * t.seconds / n},
                                    {"wait_ms_per_step", 1e3 * t.wait_seconds / n},
                                    {"bytes_per_step", t.bytes / n},
                                    {"gb_per_s", t.seconds > 0 ? t.bytes / t.seconds / 1e9 : 0.0}});
    }
    j["decode_stage_steps"] = p->steps();
  }
  // --profile on the per-op decode: per op family (a projection or norm by its weight's name), ms
  // and GB/s of a step.
  if (const OpProfile* p = b.op_profile; p != nullptr && p->steps() > 0) {
    const double n = static_cast<double>(p->steps());
    j["decode_ops"] = json::array();
    for (const OpTiming& t : p->ops()) {
      j["decode_ops"].push_back({{"op", t.op},
                                 {"ms_per_step", 1e3 * t.seconds / n},
                                 {"bytes_per_step", t.bytes / n},
                                 {"gb_per_s", t.seconds > 0 ? t.bytes / t.seconds / 1e9 : 0.0}});
    }
    j["decode_op_steps"] = p->steps();
  }
  j["memory"] = {{"weight_bytes", b.weight_bytes},
                 {"weight_formats", b.weight_formats},
                 {"kv_bytes_per_token", b.kv_bytes_per_token},
                 {"kv_pages", rep.backend->kv_pages()},
                 {"page_size", rep.model->page_size}};
  return j;
}

std::string summary_text(const RunReport& rep) {
  const EngineStats& s = *rep.stats;
  const int64_t decode_tokens = s.scheduler.decode_tokens;
  char line[512];
  std::string out;
  std::snprintf(line, sizeof line, "kiln: %s on %s (%s): %zu prompt%s, %lld prompt tokens (%lld from the prefix cache), %lld output tokens\n",
                rep.model->name, rep.backend->name(), rep.backend->info().device.c_str(), rep.results.size(),
                rep.results.size() == 1 ? "" : "s", static_cast<long long>(s.prompt_tokens),
                static_cast<long long>(s.cached_prompt_tokens), static_cast<long long>(s.output_tokens));
  out += line;
  std::snprintf(line, sizeof line,
                "kiln: time to first token %.1f ms (p50 %.1f, p99 %.1f); prefill %.0f tok/s; decode %.1f tok/s "
                "(%.2f ms/step); %lld preemptions; load %.2f s, run %.2f s\n",
                1e3 * mean(s.ttft_seconds), 1e3 * percentile(s.ttft_seconds, 0.5),
                1e3 * percentile(s.ttft_seconds, 0.99),
                s.prefill_seconds > 0 ? s.scheduler.prefill_tokens / s.prefill_seconds : 0.0,
                s.decode_seconds > 0 ? decode_tokens / s.decode_seconds : 0.0,
                s.decode_steps > 0 ? 1e3 * s.decode_seconds / s.decode_steps : 0.0,
                static_cast<long long>(s.scheduler.preemptions), rep.backend->info().load_seconds, s.wall_seconds);
  out += line;
  if (const StepProfile* p = rep.backend->info().step_profile; p != nullptr && p->steps() > 0) {
    out += "kiln: whole-step decode stages (ms/step, of which waiting; GB/s):";
    for (const StageTiming& t : p->stages()) {
      std::snprintf(line, sizeof line, " %s %.3f (%.3f; %.0f)", t.name.c_str(), 1e3 * t.seconds / p->steps(),
                    1e3 * t.wait_seconds / p->steps(), t.seconds > 0 ? t.bytes / t.seconds / 1e9 : 0.0);
      out += line;
    }
    out += "\n";
  }
  if (const OpProfile* p = rep.backend->info().op_profile; p != nullptr && p->steps() > 0) {
    out += "kiln: decode ops (ms/step; GB/s):";
    for (const OpTiming& t : p->ops()) {
      std::snprintf(line, sizeof line, " %s %.3f (%.0f)", t.op.c_str(), 1e3 * t.seconds / p->steps(),
                    t.seconds > 0 ? t.bytes / t.seconds / 1e9 : 0.0);
      out += line;
    }
    out += "\n";
  }
  return out;
}

ProgressBar::ProgressBar(int64_t total, bool enabled)
    : total_(total), enabled_(enabled && total > 1 && isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()), last_(start_) {}

void ProgressBar::update(int64_t done, int64_t output_tokens) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / std::max<int64_t>(1, total_));
  std::fprintf(stderr, "\r[%s%s] %lld/%lld requests, %.0f tok/s ", std::string(filled, '=').c_str(),
               std::string(kWidth - filled, ' ').c_str(), static_cast<long long>(done), static_cast<long long>(total_),
               seconds > 0 ? output_tokens / seconds : 0.0);
}

void ProgressBar::finish() {
  if (enabled_) std::fprintf(stderr, "\n");
}

}  // namespace kiln
