// What every command (run, serve, chat) opens from the weights flags: the tokenizer, the chat
// template, the sampling defaults of generation_config.json, the weights, the backend, and the
// engine options (context length and batch size up to the compiled maxima).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "runtime/chat/jinja_template.hpp"
#include "runtime/cli/options.hpp"
#include "runtime/engine/engine.hpp"
#include "runtime/serving/generation_defaults.hpp"
#include "runtime/structured/structured_outputs.hpp"
#include "runtime/tokenizer/tokenizer.hpp"
#include "runtime/weights/gguf.hpp"

namespace kiln {

struct ModelSetup {
  std::shared_ptr<const GgufFile> gguf;
  std::optional<Tokenizer> tokenizer;
  std::optional<JinjaChatTemplate> chat_template;  // with a tokenizer and a template (the files' or the config's format)
  std::vector<int32_t> chat_stop_ids;              // tokens that end an assistant turn
  GenerationDefaults defaults;
  std::shared_ptr<StructuredOutputs> structured;   // with a tokenizer: --json-schema, --grammar, JSONL fields
  std::unique_ptr<TensorSource> source;
  std::unique_ptr<Backend> backend;  // after load_backend()
};

// The files (fast: no weights read yet).
ModelSetup open_model(const ModelDef& model, const CliOptions& options);
// Loads the weights into the chosen backend (slow).
void load_backend(ModelSetup& setup, const ModelDef& model, const CliOptions& options);
EngineOptions engine_options(const CliOptions& options);
// The command line's sampling flags over the model's generation_config.json defaults, and its
// structured-output flag compiled (kiln::Error naming the flag when it does not compile).
SamplingParams default_params(const CliOptions& options, const ModelSetup& setup);

}  // namespace kiln
