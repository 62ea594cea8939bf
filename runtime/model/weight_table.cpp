#include "runtime/core/error.hpp"
#include "runtime/model/model_def.hpp"

namespace kiln {

namespace {
std::string key(const std::string& name, int64_t layer) { return name + "#" + std::to_string(layer); }
}  // namespace

// A second set of the same tensor replaces the first (a lookup would otherwise find the first).
void WeightTable::set(const std::string& name, int64_t layer, const void* data, MatrixFormat format, float fp8_scale) {
  const std::string k = key(name, layer);
  for (Entry& e : entries_) {
    if (e.key == k) {
      e = Entry{k, data, format, fp8_scale};
      return;
    }
  }
  entries_.push_back({k, data, format, fp8_scale});
}

void WeightTable::set_tail(const std::string& name, int64_t layer, int64_t split, const void* tail,
                           MatrixFormat tail_format) {
  const std::string k = key(name, layer);
  for (Entry& e : entries_) {
    if (e.key != k) continue;
    e.split = split;
    e.tail = tail;
    e.tail_format = tail_format;
    return;
  }
  fail("internal: set_tail of weight ", name, " of layer ", layer, ", not set before");
}

const WeightTable::Entry& WeightTable::find(const std::string& name, int64_t layer) const {
  const std::string k = key(name, layer);
  for (const Entry& e : entries_) {
    if (e.key == k) return e;
  }
  fail("weight ", name, layer >= 0 ? " of layer " + std::to_string(layer) : std::string(), " was not loaded");
}

const void* WeightTable::get(const std::string& name, int64_t layer) const { return find(name, layer).data; }

MatrixFormat WeightTable::format(const std::string& name, int64_t layer) const { return find(name, layer).format; }

}  // namespace kiln
