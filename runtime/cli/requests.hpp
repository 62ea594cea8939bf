// Turning the command line's prompts (--prompt, --chat, --prompt-ids, --prompts-file) into
// engine requests: tokenized, chat-templated, with their sampling parameters.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/cli/model_setup.hpp"
#include "runtime/cli/options.hpp"
#include "runtime/serving/sequence.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace kiln {

struct PromptJob {
  int32_t line = 0;       // prompts-file line (1-based); 0 for a command-line prompt
  std::string user_id;    // the line's "id", if any
  Request request;
  std::string error;      // non-empty: this job is not run; the message says why
};

// Turns prompts into jobs; sampling fields not given default to `defaults` (the command line's
// flags over generation_config.json).
std::vector<PromptJob> build_jobs(const CliOptions& options, const ModelInfo& model, const ModelSetup& setup,
                                  const SamplingParams& defaults);

}  // namespace kiln
