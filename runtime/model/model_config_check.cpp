#include "runtime/model/model_config_check.hpp"

#include <algorithm>
#include <filesystem>

#include "codegen/architecture_fields.hpp"
#include "codegen/config_load.hpp"
#include "runtime/core/error.hpp"

namespace kiln {

void check_model_config(const std::string& dir, const ModelInfo& model) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  if (!std::filesystem::exists(path)) {
    fail(dir, ": no config.json; a model directory needs the HF config of the model (", model.name,
         " was generated from ", model.source, ")");
  }
  if (model.config_fields.empty()) fail("internal: ", model.name, " was generated without its config fields; regenerate it");
  const std::vector<codegen::ArchitectureField> found = codegen::architecture_fields(codegen::read_hf_architecture(path));
  for (const ConfigField& want : model.config_fields) {
    const codegen::ArchitectureField expected{want.name, want.value, want.real};
    const auto it = std::find_if(found.begin(), found.end(), [&](const auto& f) { return f.name == expected.name; });
    if (it == found.end()) {
      fail(path, ": describes no ", expected.name, ", but ", model.name, " was generated from ", model.source, " with ",
           expected.name, " ", expected.value, "; this directory holds another model");
    }
    if (!codegen::same_value(*it, expected)) {
      fail(path, ": ", expected.name, " is ", it->value, ", but ", model.name, " was generated from ", model.source,
           " with ", expected.name, " ", expected.value, "; this directory holds another model");
    }
  }
}

}  // namespace kiln
