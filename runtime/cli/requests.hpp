// Turning the command line's prompts (--prompt, --chat, --prompt-ids, --prompts-file) into
// engine requests: tokenized, chat-templated, with their sampling parameters.
#pragma once

#include <optional>
#include <string>
#include <vector>

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

// The model's chat format and default system prompt, for --chat.
struct ChatSetup {
  std::string format;          // ModelInfo::chat_template ("none": --chat is refused)
  std::string default_system;  // used when no system prompt is given
  bool special_tokens_in_text = false;  // --chat-special-tokens (ChatOptions::special_tokens_in_text)
};

std::vector<PromptJob> build_jobs(const CliOptions& options, const ModelInfo& model, const ChatSetup& chat,
                                  const Tokenizer* tokenizer);

}  // namespace kiln
