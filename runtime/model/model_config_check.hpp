// A model directory's config.json must describe the model the binary was generated from: with
// another rope theta, eps or model_type the weights would load (the tensor shapes fit) and compute
// garbage. Read with kilnc's own HF reader and compared field by field.
#pragma once

#include <string>

#include "runtime/model/model_def.hpp"

namespace kiln {

// Throws kiln::Error naming DIR/config.json and the first field that differs from the binary's
// (ModelInfo::config_fields), or what is wrong with the file (missing, not valid JSON, a repeated
// key, an unsupported option).
void check_model_config(const std::string& dir, const ModelInfo& model);

}  // namespace kiln
