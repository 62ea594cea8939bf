#include "runtime/cli/cli.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>

#include "runtime/cli/chat_repl.hpp"
#include "runtime/cli/interrupt.hpp"
#include "runtime/cli/model_setup.hpp"
#include "runtime/cli/options.hpp"
#include "runtime/cli/report.hpp"
#include "runtime/cli/requests.hpp"
#include "runtime/core/error.hpp"
#include "runtime/engine/engine.hpp"
#include "runtime/server/output_processor.hpp"
#include "runtime/cli/serve.hpp"
#include "runtime/weights/safetensors.hpp"

namespace kiln {

namespace {

// Where a job came from, for messages: "requests.jsonl:3" or "the prompt".
std::string job_origin(const CliOptions& o, const PromptJob& job) {
  return job.line > 0 ? o.prompts_file + ":" + std::to_string(job.line) : std::string("the prompt");
}

// Why a request that ran has no complete answer, or "" when it has one: the KV pool was too small
// for it, or the model's logits went NaN / infinite. Both end the run with exit code 1.
std::string incomplete_reason(const FinishedRequest& f, const Backend& backend, const ModelInfo& m) {
  const size_t produced = f.output_tokens.size();
  if (f.reason == FinishReason::KvPoolFull) {
    const int32_t pages = backend.kv_pages();
    return "stopped after " + std::to_string(produced) + " tokens: the whole KV pool (" + std::to_string(pages) +
           (pages == 1 ? " page" : " pages") + " of " + std::to_string(m.page_size) +
           " tokens) is smaller than this request's context; give more --kv-pages";
  }
  if (f.reason == FinishReason::BadLogits) {
    return "the model's logits were NaN or infinite after " + std::to_string(produced) +
           " tokens; no token could be sampled";
  }
  return "";
}

// --output: JSONL, one whole line per result, flushed as soon as it is written.
class ResultFile {
 public:
  explicit ResultFile(const std::string& path) : path_(path), out_(path, std::ios::trunc) {
    if (!out_) fail(path, ": cannot write (", std::strerror(errno), ")");
  }
  void write(const nlohmann::json& result) {
    out_ << result.dump() << '\n' << std::flush;
    if (!out_) fail(path_, ": write failed (", std::strerror(errno), ")");
  }

 private:
  std::string path_;
  std::ofstream out_;
};

void write_logits(const std::string& path, const std::vector<float>& logits, int64_t vocab) {
  const int64_t rows = static_cast<int64_t>(logits.size()) / vocab;
  write_safetensors(path, {{"logits", DType::F32, {rows, vocab},
                            std::span(reinterpret_cast<const std::byte*>(logits.data()), logits.size() * 4)}});
}

int run(const ModelDef& model, const CliOptions& o) {
  const ModelInfo& m = model.info;
  ModelSetup setup = open_model(model, o);
  const Tokenizer* tokenizer = setup.tokenizer ? &*setup.tokenizer : nullptr;
  std::vector<PromptJob> jobs = build_jobs(o, m, setup, default_params(o, setup));
  // Opened before the model loads: an unwritable path fails now, not after the run.
  std::optional<ResultFile> output;
  if (!o.output.empty()) output.emplace(o.output);
  load_backend(setup, model, o);
  Engine engine(model, *setup.backend, engine_options(o));

  std::map<RequestId, size_t> job_of;
  std::map<RequestId, OutputProcessor> outputs;  // text and stop strings, per request
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!jobs[i].error.empty()) continue;
    jobs[i].request.id = static_cast<RequestId>(i + 1);
    jobs[i].request.prompt_logits = !o.dump_logits.empty();
    try {
      OutputProcessor processor(tokenizer, jobs[i].request.params);
      engine.add(jobs[i].request);
      job_of[jobs[i].request.id] = i;
      outputs.emplace(jobs[i].request.id, std::move(processor));
    } catch (const Error& e) {
      jobs[i].error = (jobs[i].line > 0 ? job_origin(o, jobs[i]) + ": " : "") + e.what();
    }
  }

  // --stream prints the text of a single request as it comes; with several, each request's text is
  // printed as soon as it finishes (interleaved tokens of several requests would not be readable).
  const bool stream_one = o.stream && job_of.size() == 1 && o.output_format == "text";
  const bool stream_each = o.stream && job_of.size() > 1 && o.output_format == "text";
  ProgressBar progress(static_cast<int64_t>(job_of.size()), o.progress && !o.stream);
  int64_t done = 0, tokens = 0;
  std::vector<RequestId> stopped;
  std::map<RequestId, std::vector<PromptTokenLogprob>> prompt_logprobs;
  const auto on_token = [&](const TokenEvent& e) {
    ++tokens;
    OutputProcessor& out = outputs.at(e.id);
    const OutputDelta d = out.push(e);
    if (!d.prompt_logprobs.empty()) prompt_logprobs[e.id] = d.prompt_logprobs;
    if (stream_one && e.token >= 0) std::cout << (tokenizer ? d.text : std::to_string(e.token) + " ") << std::flush;
    if (d.finished && !e.finished) stopped.push_back(e.id);  // a stop string ended it
    if (d.finished) {
      progress.update(++done, tokens);
      if (stream_each) {
        const PromptJob& job = jobs[job_of.at(e.id)];
        std::cout << "[" << (job.line > 0 ? job.line : 1) << "] " << out.text() << std::endl;
      }
    }
  };

  // --output gets each result as a whole line as soon as it is known (jobs that could not run
  // first), so an interrupted batch keeps everything it finished.
  std::vector<std::optional<FinishedRequest>> finished(jobs.size());
  const auto result_of = [&](size_t i) {
    JobResult r{&jobs[i], finished[i] ? &*finished[i] : nullptr, ""};
    if (r.finished && tokenizer) r.text = outputs.at(r.finished->id).text();
    if (r.finished && prompt_logprobs.count(r.finished->id)) r.prompt_logprobs = prompt_logprobs.at(r.finished->id);
    return r;
  };
  if (output) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (!jobs[i].error.empty()) output->write(result_json(result_of(i)));
    }
  }
  const InterruptCatcher interrupts;  // kept until the results and the summary are out
  while (engine.has_unfinished() && InterruptCatcher::caught() == 0) {
    engine.step(on_token);
    for (RequestId id : stopped) engine.abort(id, FinishReason::StopString);
    stopped.clear();
    for (FinishedRequest& f : engine.take_finished()) {
      const size_t i = job_of.at(f.id);
      finished[i] = std::move(f);
      if (output) output->write(result_json(result_of(i)));
    }
  }
  progress.finish();
  if (stream_one) std::cout << "\n";
  const int interrupted = InterruptCatcher::caught();

  RunReport report{&m, setup.backend.get(), &engine.stats(), {}};
  bool any_error = false;
  size_t num_finished = 0, num_unfinished = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    JobResult r = result_of(i);
    if (r.finished) {
      ++num_finished;
      if (const std::string why = incomplete_reason(*r.finished, *setup.backend, m); !why.empty()) {
        any_error = true;
        std::cerr << "kiln: error: " << job_origin(o, jobs[i]) << ": " << why << "\n";
      }
    } else if (jobs[i].error.empty()) {  // queued, but the run was interrupted first
      ++num_unfinished;
      jobs[i].error = job_origin(o, jobs[i]) + ": interrupted before it finished";
    } else {
      any_error = true;
      std::cerr << "kiln: error: " << jobs[i].error << "\n";
    }
    report.results.push_back(std::move(r));
  }

  if (!o.dump_logits.empty() && !interrupted) {
    for (const std::optional<FinishedRequest>& f : finished) {
      if (!f) continue;
      write_logits(o.dump_logits, f->prompt_logits, m.vocab_size);
      break;
    }
  }
  if (o.output_format == "json") {
    std::cout << report_json(report).dump(2) << "\n";
  } else if (!o.stream && o.output.empty()) {
    for (const JobResult& r : report.results) {
      if (!r.finished) continue;
      if (report.results.size() > 1) std::cout << "[" << (r.job->line > 0 ? r.job->line : 1) << "] ";
      if (tokenizer) {
        std::cout << r.text << "\n";
      } else {
        for (int32_t id : r.finished->output_tokens) std::cout << id << " ";
        std::cout << "\n";
      }
    }
  }
  if (!o.quiet && o.output_format == "text" && num_finished > 0) std::cerr << summary_text(report);
  if (interrupted) {
    // Always said, -q or not: the run did not do what it was asked.
    std::cerr << "kiln: interrupted by " << (interrupted == SIGINT ? "SIGINT" : "SIGTERM") << ": " << num_finished
              << " of " << jobs.size() << " requests finished" << (output ? " (written to " + o.output + ")" : "")
              << "; " << num_unfinished << " did not\n";
    return 128 + interrupted;
  }
  return any_error ? 1 : 0;
}

}  // namespace

int run_cli(const ModelDef& model, int argc, char** argv) {
  try {
    CliOptions options;
    if (std::optional<int> code = parse_options(model, argc, argv, options)) return *code;
    switch (options.command) {
      case Command::serve: return run_serve(model, options);
      case Command::chat: return run_chat(model, options);
      case Command::run: return run(model, options);
    }
    return 2;
  } catch (const Error& e) {
    std::cerr << model.info.name << ": error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << model.info.name << ": internal error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace kiln
