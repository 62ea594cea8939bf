// Config front ends: kiln YAML (configs/*.yaml) and HF config.json, both to a validated ModelSpec.
#pragma once

#include <string>
#include <vector>

#include "codegen/model_spec.hpp"

namespace kiln::codegen {

// Choices an HF config.json does not carry. Zero/empty means "derive a default".
struct ImportOptions {
  std::string name;            // default: the config's folder name
  int64_t max_context = 0;     // default: min(max_position_embeddings, 8192)
  std::string chat_template;   // default: from model_type (llama3 / chatml / deepseek)
  std::vector<int64_t> tensor_parallel;  // rank counts built besides one GPU (build.tensor_parallel)
};

// Dispatches on the file name: *.json is an HF config, *.yaml / *.yml a kiln config.
// Throws kiln::Error naming the file and field; validates the result.
ModelSpec load_config(const std::string& path, const ImportOptions& import = {},
                      std::vector<std::string>* warnings = nullptr);

ModelSpec load_kiln_yaml(const std::string& path);
ModelSpec load_hf_config(const std::string& path, const ImportOptions& import,
                         std::vector<std::string>* warnings = nullptr);
// Only the architecture of an HF config.json (model_type, shapes, RoPE, MLA and MoE fields),
// unsupported options rejected by name; no name, build choices or validate(). What the runtime
// reads of a model directory to compare it with its binary (architecture_fields.hpp).
ModelSpec read_hf_architecture(const std::string& path);

// Checks shapes and options for consistency and support; throws naming the file and field.
void validate(const ModelSpec& spec);

}  // namespace kiln::codegen
