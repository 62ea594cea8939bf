// The model's sampling defaults from its generation_config.json, which vLLM applies to every request
// that leaves a field out (temperature, top_p, top_k, min_p, repetition_penalty, and max_new_tokens
// as the default max_tokens). do_sample: false means greedy.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace kiln {

struct GenerationDefaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int32_t> top_k, max_new_tokens;
};

// DIR/generation_config.json when present (no defaults otherwise); a malformed file is an error
// that names it.
GenerationDefaults read_generation_defaults(const std::string& model_dir);

}  // namespace kiln
