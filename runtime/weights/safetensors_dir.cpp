// SafetensorsDir: one HF model directory, single-file or sharded.
#include <filesystem>

#include "runtime/core/error.hpp"
#include "runtime/core/file_io.hpp"
#include "runtime/weights/safetensors.hpp"
#include "runtime/core/strict_json.hpp"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Shard names are plain file names inside the directory; anything else (a path, "..") would let
// an index point outside the model.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

}  // namespace

SafetensorsDir::SafetensorsDir(const std::string& dir) : dir_(dir) {
  const fs::path root(dir);
  const fs::path index_path = root / "model.safetensors.index.json";
  const fs::path single_path = root / "model.safetensors";

  if (!fs::exists(index_path)) {
    if (!fs::exists(single_path)) {
      fail(dir, ": no model.safetensors or model.safetensors.index.json in this directory");
    }
    files_.push_back(std::make_unique<SafetensorsFile>(single_path.string()));
    for (const TensorView& t : files_.back()->tensors()) tensors_.emplace(t.name, &t);
    return;
  }

  const std::string origin = index_path.string();
  const nlohmann::json index = parse_json_strict(read_file(origin), origin);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    fail(origin, ": expected an object with a \"weight_map\" object (tensor name -> shard file)");
  }
  std::map<std::string, const SafetensorsFile*> shards;
  for (const auto& [tensor, shard_json] : index["weight_map"].items()) {
    if (!shard_json.is_string()) {
      fail(origin, ": weight_map entry for tensor \"", tensor, "\" must be a shard file name, got ",
           shard_json.dump());
    }
    const std::string shard = shard_json.get<std::string>();
    if (!is_plain_file_name(shard)) {
      fail(origin, ": weight_map maps tensor \"", tensor, "\" to \"", shard,
           "\", which is not a plain file name inside ", dir);
    }
    auto it = shards.find(shard);
    if (it == shards.end()) {
      const fs::path shard_path = root / shard;
      if (!fs::exists(shard_path)) {
        fail(origin, ": shard \"", shard, "\" (holding tensor \"", tensor, "\") does not exist in ", dir);
      }
      files_.push_back(std::make_unique<SafetensorsFile>(shard_path.string()));
      it = shards.emplace(shard, files_.back().get()).first;
    }
    const TensorView* view = it->second->find(tensor);
    if (view == nullptr) {
      fail(origin, ": weight_map puts tensor \"", tensor, "\" in shard \"", shard, "\", but ", it->second->path(),
           " has no such tensor");
    }
    tensors_.emplace(tensor, view);
  }
}

const TensorView* SafetensorsDir::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

std::vector<std::string> SafetensorsDir::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, view] : tensors_) out.push_back(name);  // std::map: already sorted
  return out;
}

}  // namespace kiln
