#include "runtime/cli/options.hpp"

#include <CLI/CLI.hpp>
#include <charconv>

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

}  // namespace

std::optional<int> parse_options(const ModelDef& model, int argc, char** argv, CliOptions& o) {
  const ModelInfo& m = model.info;
  CLI::App app{std::string(m.name) + ": a kiln binary generated from " + m.source +
               ". Give weights (--model, --gguf or --random-weights) and prompts."};
  app.get_formatter()->column_width(34);
  std::string prompt_ids, seed, random_weights;

  auto* weights = app.add_option_group("weights", "where the weights come from (one of)");
  weights->add_option("--model", o.model_dir, "HF model directory: config.json, *.safetensors, tokenizer.json")
      ->check(CLI::ExistingDirectory);
  weights->add_option("--gguf", o.gguf, "GGUF file (Llama architecture)")->check(CLI::ExistingFile);
  weights->add_option("--random-weights", random_weights, "deterministic random weights from SEED (benchmarks)");
  weights->require_option(1);
  app.add_option("--tokenizer", o.tokenizer, "tokenizer.json, model directory or GGUF file (default: from the weights)")
      ->check(CLI::ExistingPath);
  app.add_option("--backend", o.backend, "cuda, cpu, or auto (cuda when a GPU is present)")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));

  auto* prompts = app.add_option_group("prompts", "what to run (one of)");
  prompts->add_option("--prompt", o.prompt, "prompt text");
  prompts->add_option("--chat", o.chat, "a user message, wrapped in the model's chat template");
  prompts->add_option("--prompt-ids", prompt_ids, "prompt as token ids: 1,2,3");
  prompts->add_option("--prompts-file", o.prompts_file,
                      "JSONL, one request per line: {\"prompt\"|\"chat\"|\"prompt_ids\", sampling fields...}")
      ->check(CLI::ExistingFile);
  prompts->require_option(1);
  app.add_option("--system", o.system, "system prompt for --chat (and chat lines of --prompts-file)");
  app.add_flag("--chat-special-tokens", o.chat_special_tokens,
               "let chat and system text spell control tokens such as <|im_end|> (unsafe with untrusted text)");
  app.add_option("--output", o.output, "write results as JSONL, one line per request");

  app.add_option("--max-tokens", o.max_tokens, "tokens to generate at most")->check(positive_count("tokens"))->capture_default_str();
  app.add_option("--temperature", o.temperature, "0 is greedy")->check(CLI::Range(0.0f, 100.0f))->capture_default_str();
  app.add_option("--top-p", o.top_p, "nucleus mass in (0, 1]; 1 disables")->capture_default_str();
  app.add_option("--top-k", o.top_k, "keep the k most likely tokens; 0 disables")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--min-p", o.min_p, "drop tokens below min_p × the top probability; 0 disables")->capture_default_str();
  app.add_option("--seed", seed, "sampling seed (request i uses SEED + i); default: random");
  app.add_flag("--ignore-eos", o.ignore_eos, "keep generating past end-of-sequence tokens");
  app.add_flag("--logprobs", o.logprobs, "report each generated token's log-probability");

  app.add_option("--kv-pages", o.kv_pages, "KV-cache pages (default: from free GPU memory; CPU: 2 × max context)")
      ->check(positive_count("pages"));
  app.add_option("--gpu-mem-util", o.gpu_mem_util, "fraction of GPU memory to use in all")
      ->check(CLI::Range(0.05, 0.99))->capture_default_str();
  app.add_option("--max-batch", o.max_batch, "sequences per step at most (default: the model's build.max_batch)")
      ->check(CLI::Range(1, m.max_batch));
  app.add_flag("!--no-cuda-graphs", o.cuda_graphs, "launch decode steps directly instead of replaying CUDA graphs");

  app.add_flag("--stream", o.stream, "print tokens as they are generated");
  app.add_option("--output-format", o.output_format, "text or json (token ids, text, timings)")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_option("--dump-logits", o.dump_logits, "write the prompt's logits [prompt_len, vocab] (fp32 safetensors)");
  app.add_flag("!--no-progress", o.progress, "no progress bar for long batch runs");
  app.add_flag("-q,--quiet", o.quiet, "no summary");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (!prompt_ids.empty()) o.prompt_ids = parse_ids(prompt_ids, m.vocab_size);
  auto parse_u64 = [](const std::string& flag, const std::string& text) {
    uint64_t v = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
      fail(flag, ": '", text, "' is not a non-negative integer");
    }
    return v;
  };
  if (!seed.empty()) o.seed = parse_u64("--seed", seed);
  if (!random_weights.empty()) o.random_weights = parse_u64("--random-weights", random_weights);
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) fail("--top-p ", o.top_p, " is out of range; expected (0, 1]");
  if (!(o.min_p >= 0.0f && o.min_p < 1.0f)) fail("--min-p ", o.min_p, " is out of range; expected [0, 1)");
  if (!o.dump_logits.empty() && !o.prompts_file.empty()) fail("--dump-logits takes a single prompt, not --prompts-file");
  if (!o.system.empty() && o.chat.empty() && o.prompts_file.empty()) fail("--system goes with --chat");
  return std::nullopt;
}

}  // namespace kiln
