#include "runtime/cli/cli.hpp"

#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "runtime/cli/chat_repl.hpp"
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

void write_logits(const std::string& path, const std::vector<float>& logits, int64_t vocab) {
  const int64_t rows = static_cast<int64_t>(logits.size()) / vocab;
  write_safetensors(path, {{"logits", DType::F32, {rows, vocab},
                            std::span(reinterpret_cast<const std::byte*>(logits.data()), logits.size() * 4)}});
}

int run(const ModelDef& model, const CliOptions& o) {
  const ModelInfo& m = model.info;
  ModelSetup setup = open_model(model, o);
  const Tokenizer* tokenizer = setup.tokenizer ? &*setup.tokenizer : nullptr;
  std::vector<PromptJob> jobs = build_jobs(o, m, setup, default_params(o, setup.defaults));
  load_backend(setup, model, o);
  Engine engine(model, *setup.backend, engine_options(o));

  std::map<RequestId, size_t> job_of;
  std::map<RequestId, OutputProcessor> outputs;  // text and stop strings, per request
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!jobs[i].error.empty()) continue;
    jobs[i].request.id = static_cast<RequestId>(i + 1);
    jobs[i].request.prompt_logits = !o.dump_logits.empty();
    const auto where = [&] { return jobs[i].line > 0 ? o.prompts_file + ":" + std::to_string(jobs[i].line) + ": " : ""; };
    try {
      OutputProcessor output(tokenizer, jobs[i].request.params);
      engine.add(jobs[i].request);
      job_of[jobs[i].request.id] = i;
      outputs.emplace(jobs[i].request.id, std::move(output));
    } catch (const Error& e) {
      jobs[i].error = where() + e.what();
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
  while (engine.has_unfinished()) {
    engine.step(on_token);
    for (RequestId id : stopped) engine.abort(id, FinishReason::StopString);
    stopped.clear();
  }
  std::vector<FinishedRequest> finished = engine.take_finished();
  progress.finish();
  if (stream_one) std::cout << "\n";

  RunReport report{&m, setup.backend.get(), &engine.stats(), {}};
  std::vector<const FinishedRequest*> by_job(jobs.size(), nullptr);
  for (const FinishedRequest& f : finished) by_job[job_of.at(f.id)] = &f;
  bool any_error = false;
  for (size_t i = 0; i < jobs.size(); ++i) {
    JobResult r{&jobs[i], by_job[i], ""};
    if (r.finished && tokenizer) r.text = outputs.at(r.finished->id).text();
    if (r.finished && prompt_logprobs.count(r.finished->id)) r.prompt_logprobs = prompt_logprobs.at(r.finished->id);
    if (!r.finished) {
      any_error = true;
      std::cerr << "kiln: error: " << jobs[i].error << "\n";
    }
    report.results.push_back(std::move(r));
  }

  if (!o.dump_logits.empty() && !finished.empty()) {
    write_logits(o.dump_logits, finished.front().prompt_logits, m.vocab_size);
  }
  if (!o.output.empty()) {
    std::ofstream out(o.output);
    if (!out) fail(o.output, ": cannot write");
    for (const JobResult& r : report.results) out << result_json(r).dump() << "\n";
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
  if (!o.quiet && o.output_format == "text" && !finished.empty()) std::cerr << summary_text(report);
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
