// Command-line options of a model binary, parsed and checked (CLI11).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/model/model_def.hpp"

namespace kiln {

// The binary's commands: run prompts and exit (the default), serve the OpenAI API, or chat.
enum class Command { run, serve, chat };

struct CliOptions {
  Command command = Command::run;

  // Weights: exactly one of these.
  std::string model_dir;                   // --model DIR (or -m DIR): HF directory (config.json, safetensors, tokenizer)
  std::string gguf;                        // --gguf FILE (or -m FILE.gguf): Llama-architecture GGUF file
  std::optional<uint64_t> random_weights;  // --random-weights SEED
  std::string tokenizer;                   // --tokenizer: tokenizer.json, model directory or GGUF

  std::string backend = "auto";  // auto | cuda | cpu | ref
  int32_t threads = 0;           // --threads: the CPU backends' pool (0: the physical cores)
  int32_t tensor_parallel = 1;   // --tensor-parallel-size N: one of the model's builds (GPUs, or CPU threads)

  // Prompts.
  std::string prompt;          // --prompt TEXT
  std::string chat;            // --chat TEXT (rendered with the model's chat template)
  std::string system;          // --system TEXT (chat)
  bool chat_special_tokens = false;  // --chat-special-tokens: chat text may spell control tokens (unsafe)
  std::vector<int32_t> prompt_ids;  // --prompt-ids 1,2,3
  std::string prompts_file;    // --prompts-file F (JSONL)
  std::string output;          // --output F (JSONL results)

  // Sampling defaults (a prompts-file line may override each). Unset ones come from the model's
  // generation_config.json, else the values noted.
  int32_t max_tokens = 256;
  std::optional<float> temperature;  // 0.8
  std::optional<float> top_p;        // 0.95
  std::optional<int32_t> top_k;      // 40
  std::optional<float> min_p;        // 0
  std::optional<float> repetition_penalty;  // 1
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  std::vector<std::string> stop;     // --stop STR (repeatable)
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  bool logprobs = false;
  // Structured output (llama.cpp's flags): at most one of these.
  std::string grammar, grammar_file;          // --grammar GBNF, --grammar-file FILE
  std::string json_schema, json_schema_file;  // -j/--json-schema SCHEMA, --json-schema-file FILE

  // Engine.
  int32_t kv_pages = 0;
  double gpu_mem_util = 0.9;
  double swap_space_gib = -1;  // --swap-space: host memory for preempted sequences' KV (0: recompute; -1: default)
  int32_t max_batch = 0;     // --max-num-seqs: up to the compiled build.max_batch
  double max_decode_slowdown = 0;  // --max-decode-slowdown: steps that decode carry prompt chunks this small (0: off)
  int32_t max_context = 0;   // --max-model-len / -c: up to the compiled build.max_context
  bool cuda_graphs = true;
  bool megakernel = false;    // --megakernel: small decode steps in the model's whole-step kernel
  bool l2_warm = false;       // --l2-warm: tensor-parallel decode all-reduces warm the next weight in L2
  bool pdl = true;            // --no-pdl: kernels launch plainly, not as programmatic dependents
  bool batch_invariant = false;  // --batch-invariant: decode steps past one GEMV pass keep the GEMV
  bool profile = false;
  std::string quantize = "none";  // --quantize: none, or fp8 (every matrix in FP8 at load)

  // serve.
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;            // also from $KILN_API_KEY
  std::string served_model_name;  // default: the model's name
  std::string tool_call_parser;   // --tool-call-parser: hermes, llama3_json (tool_choice "auto" answers parsed)
  bool enable_auto_tool_choice = false;  // vLLM's flag; needs --tool-call-parser
  std::string reasoning_parser;   // --reasoning-parser: qwen3, deepseek_r1 (<think> as reasoning_content)
  int32_t max_waiting = 1024;
  size_t max_request_bytes = 8u << 20;
  int http_threads = 0;

  // Output.
  bool stream = false;
  std::string output_format = "text";  // text | json
  std::string dump_logits;             // --dump-logits F (safetensors, logits [prompt_len, vocab])
  bool progress = true;
  bool quiet = false;
};

// Parses the command line (argv[1] may name the command: serve, chat). On --help, --version or a
// usage error, returns the exit code to end with.
std::optional<int> parse_options(const ModelDef& model, int argc, char** argv, CliOptions& options);

// "kiln <version> (<model> from <config>)"
std::string version_line(const ModelInfo& model);

}  // namespace kiln
