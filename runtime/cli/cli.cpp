#include "runtime/cli/cli.hpp"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "runtime/cli/interrupt.hpp"
#include "runtime/cli/options.hpp"
#include "runtime/cli/report.hpp"
#include "runtime/cli/requests.hpp"
#include "runtime/core/error.hpp"
#include "runtime/engine/engine.hpp"
#include "runtime/model/gguf_source.hpp"
#include "runtime/model/model_config_check.hpp"
#include "runtime/tokenizer/stream_decoder.hpp"
#include "runtime/weights/safetensors.hpp"

namespace kiln {

namespace {

// The tokenizer that goes with the weights, if there is one: --tokenizer, else the model
// directory's tokenizer.json, else the vocabulary of `gguf` (the --gguf file, already open).
std::optional<Tokenizer> open_tokenizer(const CliOptions& o, const GgufFile* gguf) {
  namespace fs = std::filesystem;
  if (!o.tokenizer.empty()) {
    if (fs::is_directory(o.tokenizer)) return Tokenizer::from_model_dir(o.tokenizer);
    if (o.tokenizer.ends_with(".gguf")) return Tokenizer::from_gguf_file(o.tokenizer);
    return Tokenizer::from_tokenizer_json(o.tokenizer);
  }
  if (!o.model_dir.empty() && fs::exists(fs::path(o.model_dir) / "tokenizer.json")) {
    return Tokenizer::from_model_dir(o.model_dir);
  }
  if (gguf != nullptr) return Tokenizer::from_gguf(*gguf);
  return std::nullopt;
}

std::unique_ptr<Backend> open_backend(const ModelDef& model, const CliOptions& o, const TensorSource* source) {
  WeightOrigin origin{source, o.random_weights.value_or(0)};
  BackendOptions options{o.kv_pages, o.gpu_mem_util, o.cuda_graphs};
  const bool gpu = o.backend == "cuda" || (o.backend == "auto" && cuda_available());
  return gpu ? make_cuda_backend(model, origin, options) : make_cpu_backend(model, origin, options);
}

// A model's vocabulary may be larger than its tokenizer's (Qwen3 pads 151,669 tokens to 151,936
// rows); a sampled padding id has no text, as in HF's decode, rather than being an error.
bool has_text(const Tokenizer& tokenizer, int32_t id) { return id >= 0 && static_cast<size_t>(id) < tokenizer.vocab_size(); }

std::string decode_output(const Tokenizer& tokenizer, std::span<const int32_t> ids) {
  std::vector<int32_t> known;
  known.reserve(ids.size());
  for (int32_t id : ids) {
    if (has_text(tokenizer, id)) known.push_back(id);
  }
  return tokenizer.decode(known, /*skip_special=*/true);
}

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
  // First: the tensor shapes alone may fit another model (other rope theta, eps, model_type).
  if (!o.model_dir.empty()) check_model_config(o.model_dir, m);
  // Opened once for both the weights and the vocabulary.
  const std::shared_ptr<const GgufFile> gguf = o.gguf.empty() ? nullptr : std::make_shared<const GgufFile>(o.gguf);
  const std::optional<Tokenizer> tokenizer = open_tokenizer(o, gguf.get());
  if (tokenizer && static_cast<int64_t>(tokenizer->vocab_size()) > m.vocab_size) {
    fail("the tokenizer (", tokenizer->describe(), ") has ", tokenizer->vocab_size(), " tokens but ", m.name,
         " has a vocabulary of ", m.vocab_size);
  }
  const ChatSetup chat{m.chat_template, m.chat_default_system, o.chat_special_tokens};
  std::vector<PromptJob> jobs = build_jobs(o, m, chat, tokenizer ? &*tokenizer : nullptr);

  // Opened before the model loads: an unwritable path fails now, not after the run.
  std::optional<ResultFile> output;
  if (!o.output.empty()) output.emplace(o.output);

  std::unique_ptr<TensorSource> source;
  if (!o.model_dir.empty()) source = open_safetensors_source(o.model_dir);
  if (gguf) source = open_gguf_source(gguf, m);
  const std::unique_ptr<Backend> backend = open_backend(model, o, source.get());

  EngineOptions engine_options;
  engine_options.max_batch = o.max_batch;
  engine_options.capture_prompt_logits = !o.dump_logits.empty();
  Engine engine(model, *backend, engine_options);

  std::map<RequestId, size_t> job_of;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!jobs[i].error.empty()) continue;
    jobs[i].request.id = static_cast<RequestId>(i + 1);
    try {
      engine.add(jobs[i].request);
      job_of[jobs[i].request.id] = i;
    } catch (const Error& e) {
      jobs[i].error = (jobs[i].line > 0 ? job_origin(o, jobs[i]) + ": " : "") + e.what();
    }
  }

  // Streaming prints text (or ids) of the single request as it comes.
  const bool stream = o.stream && job_of.size() == 1 && o.output_format == "text";
  std::optional<StreamDecoder> decoder;
  if (stream && tokenizer) decoder.emplace(*tokenizer, /*skip_special=*/true);
  ProgressBar progress(static_cast<int64_t>(job_of.size()), o.progress && !stream);
  int64_t done = 0, tokens = 0;
  const auto on_token = [&](const TokenEvent& e) {
    ++tokens;
    if (stream && e.token >= 0) {
      if (!decoder) {
        std::cout << e.token << " " << std::flush;
      } else if (has_text(*tokenizer, e.token)) {
        std::cout << decoder->push(e.token) << std::flush;
      }
    }
    if (e.finished) progress.update(++done, tokens);
  };

  // --output gets each result as a whole line as soon as it is known (jobs that could not run
  // first), so an interrupted batch keeps everything it finished.
  std::vector<std::optional<FinishedRequest>> finished(jobs.size());
  const auto result_of = [&](size_t i) {
    JobResult r{&jobs[i], finished[i] ? &*finished[i] : nullptr, ""};
    if (r.finished && tokenizer) r.text = decode_output(*tokenizer, r.finished->output_tokens);
    return r;
  };
  if (output) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (!jobs[i].error.empty()) output->write(result_json(result_of(i)));
    }
  }
  const InterruptCatcher interrupts;  // kept until the results and the summary are out
  engine.run_until([] { return InterruptCatcher::caught() != 0; }, on_token, [&](FinishedRequest&& f) {
    const size_t i = job_of.at(f.id);
    finished[i] = std::move(f);
    if (output) output->write(result_json(result_of(i)));
  });
  progress.finish();
  if (stream) std::cout << (decoder ? decoder->flush() : "") << "\n";
  const int interrupted = InterruptCatcher::caught();

  RunReport report{&m, backend.get(), &engine.stats(), {}};
  bool any_error = false;
  size_t num_finished = 0, num_unfinished = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    JobResult r = result_of(i);
    if (r.finished) {
      ++num_finished;
      if (const std::string why = incomplete_reason(*r.finished, *backend, m); !why.empty()) {
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

  if (!o.dump_logits.empty() && !interrupted) write_logits(o.dump_logits, engine.prompt_logits(), m.vocab_size);
  if (o.output_format == "json") {
    std::cout << report_json(report).dump(2) << "\n";
  } else if (!stream && o.output.empty()) {
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
    return run(model, options);
  } catch (const Error& e) {
    std::cerr << model.info.name << ": error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << model.info.name << ": internal error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace kiln
