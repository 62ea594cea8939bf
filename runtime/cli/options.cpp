#include "runtime/cli/options.hpp"

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string_view>

#include "runtime/core/error.hpp"

namespace kiln {

namespace {

std::vector<int32_t> parse_ids(const std::string& text, int32_t vocab_size) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    int64_t value = -1;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size()) {
      fail("--prompt-ids: '", item, "' is not a token id; expected comma-separated integers like 1,2,3");
    }
    if (value < 0 || value >= vocab_size) {
      fail("--prompt-ids: token id ", value, " is outside the vocabulary (0..", vocab_size - 1, ")");
    }
    ids.push_back(static_cast<int32_t>(value));
    start = end + 1;
  }
  return ids;
}

// A whole number of at least 1, with a message a person can read.
CLI::Validator positive_count(const std::string& what) {
  return CLI::Validator(
      [what](std::string& text) -> std::string {
        try {
          size_t used = 0;
          const long long v = std::stoll(text, &used);
          if (used == text.size() && v >= 1) return "";
        } catch (const std::exception&) {
        }
        return "expected a positive number of " + what + ", got '" + text + "'";
      },
      "POSITIVE");
}

// A limit up to the model's compiled maximum, named in the message.
// 0 (off), or a factor above 1.
CLI::Validator slowdown_factor() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          size_t used = 0;
          const double v = std::stod(text, &used);
          if (used == text.size() && (v == 0 || (v > 1 && v <= 1000))) return "";
        } catch (const std::exception&) {
        }
        return "is '" + text + "'; expected 0 (off) or a factor above 1 (at most 1000)";
      },
      "0 or (1, 1000]");
}

CLI::Validator up_to(int32_t max, const std::string& what) {
  return CLI::Validator(
      [max, what](std::string& text) -> std::string {
        try {
          size_t used = 0;
          const long long v = std::stoll(text, &used);
          if (used == text.size() && v >= 1 && v <= max) return "";
        } catch (const std::exception&) {
        }
        return "expected " + what + " in [1, " + std::to_string(max) + "] (the compiled maximum), got '" + text + "'";
      },
      "1.." + std::to_string(max));
}

uint64_t parse_u64(const std::string& flag, const std::string& text) {
  uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    fail(flag, ": '", text, "' is not a non-negative integer");
  }
  return v;
}

}  // namespace

std::string version_line(const ModelInfo& m) {
  return std::string("kiln ") + KILN_VERSION + " (" + m.name + ", generated from " + m.source + ")";
}

std::optional<int> parse_options(const ModelDef& model, int argc, char** argv, CliOptions& o) {
  const ModelInfo& m = model.info;
  // The command, if any, comes first: `<model> serve ...`, `<model> chat ...`.
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) args.emplace_back(argv[i]);  // CLI11 takes them reversed
  if (!args.empty() && (args.back() == "serve" || args.back() == "chat")) {
    o.command = args.back() == "serve" ? Command::serve : Command::chat;
    args.pop_back();
  }
  const bool run = o.command == Command::run;
  const std::string title = run ? ": a kiln binary generated from " + std::string(m.source) +
                                      ". Give weights (-m DIR|FILE.gguf or --random-weights) and prompts. "
                                      "Also: `" + m.name + " serve` (OpenAI API server), `" + m.name + " chat` (interactive chat)."
                : o.command == Command::serve ? " serve: an OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, /v1/models, /health, /metrics)."
                                              : " chat: an interactive chat in the model's chat template (/clear, /exit; one message per line from a pipe).";
  CLI::App app{std::string(m.name) + title};
  app.get_formatter()->column_width(38);
  std::string prompt_ids, seed, random_weights, model_path;
  float temperature = 0.8f, top_p = 0.95f, min_p = 0.0f, repetition_penalty = 1.0f;
  int32_t top_k = 40;
  bool version = false;
  app.add_flag("--version", version, "print the version and exit");

  auto* weights = app.add_option_group("weights", "where the weights come from (one of)");
  weights->add_option("-m,--model", model_path, "HF model directory (config.json, *.safetensors, tokenizer.json) or a .gguf file")
      ->check(CLI::ExistingPath);
  weights->add_option("--gguf", o.gguf, "GGUF file (llama, qwen3 or deepseek2 architecture)")->check(CLI::ExistingFile);
  weights->add_option("--random-weights", random_weights, "deterministic random weights from SEED (benchmarks, tests)");
  app.add_option("--tokenizer", o.tokenizer, "tokenizer.json, model directory or GGUF file (default: from the weights)")
      ->check(CLI::ExistingPath);
  app.add_option("--backend", o.backend,
                 "cuda, cpu (fast: the weights as stored), ref (the fp32 reference, the oracle of the tests), or auto "
                 "(cuda when a GPU is present, else cpu)")
      ->check(CLI::IsMember({"auto", "cuda", "cpu", "ref"}));
  app.add_option("--threads", o.threads, "threads of the CPU backends, the workers pinned one per core (default: the physical cores)")
      ->check(CLI::Range(1, 64));

  CLI::Option_group* prompts = nullptr;
  if (run) {
    prompts = app.add_option_group("prompts", "what to run (one of)");
    prompts->add_option("-p,--prompt", o.prompt, "prompt text");
    prompts->add_option("--chat", o.chat, "a user message, wrapped in the model's chat template");
    prompts->add_option("--prompt-ids", prompt_ids, "prompt as token ids: 1,2,3");
    prompts->add_option("--prompts-file", o.prompts_file,
                        "JSONL, one request per line: {\"prompt\"|\"chat\"|\"prompt_ids\", sampling fields...}")
        ->check(CLI::ExistingFile);
    app.add_option("--output", o.output, "write results as JSONL, one line per request");
  }
  if (o.command != Command::serve) app.add_option("--system", o.system, "system prompt for chat");
  app.add_flag("--chat-special-tokens", o.chat_special_tokens,
               "let chat and system text spell control tokens such as <|im_end|> (unsafe with untrusted text)");

  if (o.command != Command::serve) {
    app.add_option("-n,--n-predict,--max-tokens", o.max_tokens, "tokens to generate at most")
        ->check(positive_count("tokens"))->capture_default_str();
    app.add_option("--temp,--temperature", temperature, "0 is greedy (default: generation_config.json, else 0.8)")
        ->check(CLI::Range(0.0f, 100.0f));
    app.add_option("--top-p", top_p, "nucleus mass in (0, 1]; 1 disables (default: generation_config.json, else 0.95)");
    app.add_option("--top-k", top_k, "keep the k most likely tokens; 0 disables (default: generation_config.json, else 40)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--min-p", min_p, "drop tokens below min_p × the top probability; 0 disables");
    app.add_option("--repeat-penalty,--repetition-penalty", repetition_penalty, "divide logits of seen tokens (> 0; 1 disables)");
    app.add_option("--presence-penalty", o.presence_penalty, "minus this for tokens already generated ([-2, 2])")->check(CLI::Range(-2.0f, 2.0f));
    app.add_option("--frequency-penalty", o.frequency_penalty, "minus this times each token's count so far ([-2, 2])")->check(CLI::Range(-2.0f, 2.0f));
    app.add_option("--stop", o.stop, "stop when the text reaches STR (repeatable; not printed)");
    app.add_option("-s,--seed", seed, "sampling seed (request i uses SEED + i); default: random");
    app.add_flag("--ignore-eos", o.ignore_eos, "keep generating past end-of-sequence tokens");
    app.add_flag("--logprobs", o.logprobs, "report each generated token's log-probability");
    auto* structured = app.add_option_group("structured output", "constrain the text (at most one of)");
    structured->add_option("--grammar", o.grammar, "a GBNF grammar (llama.cpp's format) the text must follow");
    structured->add_option("--grammar-file", o.grammar_file, "the same, from a file")->check(CLI::ExistingFile);
    structured->add_option("-j,--json-schema", o.json_schema, "a JSON schema the text must be an instance of");
    structured->add_option("--json-schema-file", o.json_schema_file, "the same, from a file")->check(CLI::ExistingFile);
    structured->require_option(0, 1);
  }

  app.add_option("--tensor-parallel-size,--tp", o.tensor_parallel,
                 "split the model over N GPUs (NCCL) or, with --backend ref, N threads; N must be one of the "
                 "sizes the model was built for (build.tensor_parallel)")
      ->check(CLI::Range(1, 64));
  app.add_option("--kv-pages", o.kv_pages, "KV-cache pages (default: from free GPU memory; CPU: 2 × max context)")
      ->check(positive_count("pages"));
  app.add_option("--max-decode-slowdown", o.max_decode_slowdown,
                 "while requests decode, cap a step's prompt chunk so that the step takes at most this many times a "
                 "decode-only step (measured as the run goes; long prompts then prefill over more steps); 0: prompt "
                 "chunks fill the step's token budget (the default: a chunk costs a whole pass over the weights beside the decodes' "
                 "own, so small chunks mostly stretch the prefill; bench/RESULTS.md, 2026-11-25)")
      ->check(slowdown_factor())->capture_default_str();
  app.add_option("--swap-space", o.swap_space_gib,
                 "GiB of host memory a preempted request's KV is swapped out to and back from (vLLM's name; "
                 "default: 4, or a quarter of the free host memory when that is less); 0: preempted requests "
                 "recompute their KV instead")
      ->check(CLI::Range(0.0, 1048576.0));
  app.add_option("--gpu-memory-utilization,--gpu-mem-util", o.gpu_mem_util, "fraction of GPU memory to use in all")
      ->check(CLI::Range(0.05, 0.99))->capture_default_str();
  app.add_option("--max-num-seqs,--max-batch", o.max_batch, "sequences per step at most (default: the compiled build.max_batch)")
      ->check(up_to(m.max_batch, "sequences"));
  app.add_option("-c,--ctx-size,--max-model-len", o.max_context, "context length: prompt + output tokens (default: the compiled build.max_context)")
      ->check(up_to(m.max_context, "tokens"));
  app.add_flag("!--no-cuda-graphs", o.cuda_graphs, "launch decode steps directly instead of replaying CUDA graphs");
  app.add_flag("--megakernel,!--no-megakernel", o.megakernel,
               "run decode steps of up to build.megakernel_max_batch sequences in the model's whole-step kernel "
               "(Llama, SmolLM2, Qwen3 on one GPU; default: op by op)");
  app.add_flag("--l2-warm,!--no-l2-warm", o.l2_warm,
               "tensor parallelism: warm the next projection's weight in L2 during each decode all-reduce (off by "
               "default: on two H200s it made a Llama-3.1-8B decode step 1.5x slower; to measure it)");
  app.add_flag("--batch-invariant", o.batch_invariant,
               "a request's tokens the same whatever shares its decode steps, at any batch: steps of more than 64 "
               "sequences keep the GEMV (slower there) instead of cuBLASLt (builds of build.max_batch up to 64 never "
               "leave it; the CPU backends are invariant anyway)");
  app.add_flag("!--no-pdl", o.pdl,
               "launch each kernel plainly, after the one before has ended, instead of as a programmatic "
               "dependent that starts during its last blocks (to measure what that buys)");
  app.add_option("--quantize", o.quantize,
                 "fp8: quantize every matrix (projections, LM head, embedding table) to FP8 E4M3 at load, one scale "
                 "a matrix (one GPU, or --backend ref to compare with; an FP8 checkpoint needs no "
                 "flag)")
      ->check(CLI::IsMember({"none", "fp8"}))->capture_default_str();
  app.add_flag("--profile", o.profile,
               "count what each decode step reads (MoE: the routed experts chosen) for --output-format json");

  if (o.command == Command::serve) {
    app.add_option("--host", o.host, "address to listen on")->capture_default_str();
    app.add_option("--port", o.port, "port (0: any free one, printed at start)")->check(CLI::Range(0, 65535))->capture_default_str();
    app.add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY' on /v1/* (default: $KILN_API_KEY)");
    app.add_option("--served-model-name", o.served_model_name, "the model name of the API (default: the binary's model name)");
    auto* parser = app.add_option("--tool-call-parser", o.tool_call_parser,
                                  "with tools and tool_choice \"auto\", parse the calls the model writes into tool_calls: "
                                  "hermes (Qwen2.5, Qwen3, SmolLM2), llama3_json (Llama 3.1, 3.2), pythonic (Llama 3.2, "
                                  "Llama 4: [f(x=1)])")
                       ->check(CLI::IsMember({"hermes", "llama3_json", "pythonic"}));
    app.add_flag("--enable-auto-tool-choice", o.enable_auto_tool_choice,
                 "vLLM's flag, accepted with --tool-call-parser (which alone turns the parsing on)")
        ->needs(parser);
    app.add_option("--reasoning-parser", o.reasoning_parser,
                   "chat answers' <think>...</think> come back as reasoning_content: qwen3 (the model opens the "
                   "block), deepseek_r1 (the template opened it)")
        ->check(CLI::IsMember({"qwen3", "deepseek_r1"}));
    app.add_option("--max-waiting", o.max_waiting, "requests waiting for a batch slot at most; more get 503 with Retry-After")
        ->check(positive_count("requests"))->capture_default_str();
    app.add_option("--max-request-bytes", o.max_request_bytes, "larger request bodies get 413")->check(positive_count("bytes"))->capture_default_str();
    app.add_option("--http-threads", o.http_threads, "HTTP worker threads (default: max-num-seqs + max-waiting + 64)")->check(positive_count("threads"));
  }

  if (run) {
    app.add_flag("--stream", o.stream, "print text as it is generated (several requests: each as soon as it finishes)");
    app.add_option("--output-format", o.output_format, "text or json (token ids, text, timings)")
        ->check(CLI::IsMember({"text", "json"}));
    app.add_option("--dump-logits", o.dump_logits, "write the prompt's logits [prompt_len, vocab] (fp32 safetensors)");
    app.add_flag("!--no-progress", o.progress, "no progress bar for long batch runs");
    app.add_flag("-q,--quiet", o.quiet, "no summary");
  }

  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (version) {
    std::cout << version_line(m) << "\n";
    return 0;
  }
  const int sources = !model_path.empty() + !o.gguf.empty() + !random_weights.empty();
  if (sources != 1) fail("give exactly one of -m/--model DIR|FILE.gguf, --gguf FILE, --random-weights SEED (see --help)");
  if (run && prompts->count_all() != 1) fail("give exactly one of -p/--prompt, --chat, --prompt-ids, --prompts-file (see --help)");
  if (!model_path.empty()) {
    // -m takes what llama.cpp's -m and vLLM's --model take: a .gguf file or a model directory.
    if (std::filesystem::is_directory(model_path)) {
      o.model_dir = model_path;
    } else if (model_path.ends_with(".gguf")) {
      o.gguf = model_path;
    } else {
      fail("-m/--model ", model_path, ": expected a model directory or a .gguf file");
    }
  }

  // Sampling flags given on the command line override generation_config.json.
  const auto given = [&](const char* name) {
    const CLI::Option* option = app.get_option_no_throw(name);  // serve has no sampling flags
    return option != nullptr && option->count() > 0;
  };
  if (given("--temp")) o.temperature = temperature;
  if (given("--top-p")) o.top_p = top_p;
  if (given("--top-k")) o.top_k = top_k;
  if (given("--min-p")) o.min_p = min_p;
  if (given("--repeat-penalty")) o.repetition_penalty = repetition_penalty;
  if (!prompt_ids.empty()) o.prompt_ids = parse_ids(prompt_ids, m.vocab_size);
  if (!seed.empty()) o.seed = parse_u64("--seed", seed);
  if (!random_weights.empty()) o.random_weights = parse_u64("--random-weights", random_weights);
  if (o.top_p && !(*o.top_p > 0.0f && *o.top_p <= 1.0f)) fail("--top-p ", *o.top_p, " is out of range; expected (0, 1]");
  if (o.min_p && !(*o.min_p >= 0.0f && *o.min_p < 1.0f)) fail("--min-p ", *o.min_p, " is out of range; expected [0, 1)");
  if (o.repetition_penalty && !(*o.repetition_penalty > 0.0f)) fail("--repeat-penalty ", *o.repetition_penalty, " is out of range; expected > 0");
  // DeepSeek-V2's routed experts take the prefill's grouped GEMM past one GEMV pass whatever the flag.
  const int32_t max_batch = o.max_batch > 0 ? o.max_batch : m.max_batch;
  if (o.batch_invariant && m.num_routed_experts > 0 && m.decode_gemm_above > 0 && max_batch > m.decode_gemm_above) {
    fail("--batch-invariant: ", m.name, " decodes up to ", max_batch, " sequences a step, and past ",
         m.decode_gemm_above, " its routed experts run a grouped GEMM whose sums take another order; add --max-batch ",
         m.decode_gemm_above);
  }
  if (!o.dump_logits.empty() && !o.prompts_file.empty()) fail("--dump-logits takes a single prompt, not --prompts-file");
  if (run && !o.system.empty() && o.chat.empty() && o.prompts_file.empty()) fail("--system goes with --chat");
  if (o.api_key.empty()) {
    if (const char* key = std::getenv("KILN_API_KEY")) o.api_key = key;
  }
  return std::nullopt;
}

}  // namespace kiln
