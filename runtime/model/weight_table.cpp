#include "runtime/core/error.hpp"
#include "runtime/model/model_def.hpp"

namespace kiln {

namespace {
std::string key(const std::string& name, int64_t layer) { return name + "#" + std::to_string(layer); }
}  // namespace

void WeightTable::set(const std::string& name, int64_t layer, const void* data) {
  entries_.emplace_back(key(name, layer), data);
}

const void* WeightTable::get(const std::string& name, int64_t layer) const {
  const std::string k = key(name, layer);
  for (const auto& [entry, data] : entries_) {
    if (entry == k) return data;
  }
  fail("weight ", name, layer >= 0 ? " of layer " + std::to_string(layer) : std::string(), " was not loaded");
}

}  // namespace kiln
