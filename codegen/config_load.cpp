// load_config: the front end by file name.
#include <filesystem>

#include "codegen/config_load.hpp"
#include "runtime/core/error.hpp"

namespace kiln::codegen {

ModelSpec load_config(const std::string& path, const ImportOptions& import, std::vector<std::string>* warnings) {
  if (!std::filesystem::exists(path)) fail(path, ": cannot read the file (it does not exist)");
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".json") return load_hf_config(path, import, warnings);
  if (ext == ".yaml" || ext == ".yml") return load_kiln_yaml(path);
  fail(path, ": unknown config kind; expected a kiln config (.yaml) or an HF config.json (.json)");
}

}  // namespace kiln::codegen
