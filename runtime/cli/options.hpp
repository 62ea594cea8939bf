// Command-line options of a model binary, parsed and checked (CLI11).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/model/model_def.hpp"

namespace kiln {

struct CliOptions {
  // Weights: exactly one of these.
  std::string model_dir;                   // --model: HF directory (config.json, safetensors, tokenizer)
  std::string gguf;                        // --gguf: Llama-architecture GGUF file
  std::optional<uint64_t> random_weights;  // --random-weights SEED
  std::string tokenizer;                   // --tokenizer: tokenizer.json, model directory or GGUF

  std::string backend = "auto";  // auto | cuda | cpu

  // Prompts.
  std::string prompt;          // --prompt TEXT
  std::string chat;            // --chat TEXT (rendered with the model's chat template)
  std::string system;          // --system TEXT (chat)
  bool chat_special_tokens = false;  // --chat-special-tokens: chat text may spell control tokens (unsafe)
  std::vector<int32_t> prompt_ids;  // --prompt-ids 1,2,3
  std::string prompts_file;    // --prompts-file F (JSONL)
  std::string output;          // --output F (JSONL results)

  // Sampling defaults (a prompts-file line may override each).
  int32_t max_tokens = 256;
  float temperature = 0.8f;
  float top_p = 0.95f;
  int32_t top_k = 40;
  float min_p = 0.0f;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  bool logprobs = false;

  // Engine.
  int32_t kv_pages = 0;
  double gpu_mem_util = 0.9;
  int32_t max_batch = 0;
  bool cuda_graphs = true;

  // Output.
  bool stream = false;
  std::string output_format = "text";  // text | json
  std::string dump_logits;             // --dump-logits F (safetensors, logits [prompt_len, vocab])
  bool progress = true;
  bool quiet = false;
};

// Parses the command line. On --help or a usage error, returns the exit code to end with.
std::optional<int> parse_options(const ModelDef& model, int argc, char** argv, CliOptions& options);

}  // namespace kiln
