// The architecture a config describes, as HF config.json field names and values, in a fixed
// order (model_type first). A model binary records this list for the config it was generated from
// (ModelInfo::config_fields); the runtime reads a model directory's config.json with the same
// reader (read_hf_architecture), makes the same list and compares the two field by field, so a
// directory whose config contradicts the binary is refused naming the first difference.
#pragma once

#include <string>
#include <vector>

#include "codegen/model_spec.hpp"

namespace kiln::codegen {

struct ArchitectureField {
  std::string name;   // HF's name: "rope_theta", "num_key_value_heads"
  std::string value;  // integers and names exactly; reals in shortest round-trip form (whole ones as digits)
  bool real = false;  // compared with a tolerance (a config converted from GGUF holds fp32 values)
};

std::vector<ArchitectureField> architecture_fields(const ModelSpec& spec);

// Whether two values of one field agree: texts equal, or for reals within 1e-6 relative (fp32
// rounding of a value written as fp64, not a different value).
bool same_value(const ArchitectureField& a, const ArchitectureField& b);

}  // namespace kiln::codegen
