#include "runtime/model/random_source.hpp"

#include <cmath>
#include <map>

#include "runtime/core/error.hpp"
#include "runtime/core/hash.hpp"
#include "runtime/core/parallel.hpp"
#include "runtime/model/weight_loader.hpp"
#include "runtime/weights/shape.hpp"

namespace kiln {

namespace {

class RandomSource final : public TensorSource {
 public:
  RandomSource(const ModelDef& model, uint64_t seed) : seed_(seed) {
    for (const WeightSpec& spec : *model.weights) {
      if (spec.tied_to[0] != '\0' || spec.layouts.empty()) continue;  // tied: reuses its target's values
      const bool vector = spec.shape.size() == 1;
      const int64_t first = spec.per_layer ? spec.layer_first : -1;
      const int64_t last = spec.per_layer ? spec.layer_last : 0;
      for (int64_t layer = first; layer < last; ++layer) {
        for (int32_t rank = 0; rank < model.info.tensor_parallel; ++rank) {  // every rank's experts
          for (const LayoutPiece& p : expand_layout(spec, spec.layouts.front(), layer, rank)) add(model, spec, p, vector);
        }
      }
    }
  }

  std::string describe() const override { return "random weights (seed " + std::to_string(seed_) + ")"; }

  std::vector<std::string> names() const override {
    std::vector<std::string> names;
    for (const auto& [name, t] : tensors_) names.push_back(name);
    return names;
  }

  std::optional<std::vector<int64_t>> shape(const std::string& name) const override {
    const auto at = tensors_.find(name);
    if (at == tensors_.end()) return std::nullopt;
    return at->second.shape;
  }

  void read_rows(const std::string& name, int64_t first, int64_t count, float* out) const override {
    const auto at = tensors_.find(name);
    if (at == tensors_.end()) fail(describe(), ": no tensor ", name);
    const std::vector<int64_t>& shape = at->second.shape;
    const int64_t cols = shape.back();
    const int64_t rows = shape.size() == 1 ? 1 : shape.front();
    if (first < 0 || count < 0 || first + count > rows) {
      fail(describe(), ": rows [", first, ", ", first + count, ") are outside tensor ", name, " ", shape_text(shape));
    }
    // The name (layer and expert substituted) and the seed pick the stream; the flat index the value.
    uint64_t h = seed_ ^ kGoldenGamma;
    for (const char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
    const bool norm = at->second.norm;
    const int64_t base = first * cols;
    parallel_for(count * cols, 1 << 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const uint64_t z = mix64(h + static_cast<uint64_t>(base + i) * kGoldenGamma);  // splitmix64
        const float u = static_cast<float>(z >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;  // [-1, 1)
        out[i] = norm ? 1.0f + 0.1f * u : 0.02f * std::sqrt(3.0f) * u;
      }
    });
  }

 private:
  void add(const ModelDef& model, const WeightSpec& spec, const LayoutPiece& p, bool vector) {
    const auto [rows, cols] = whole_hf_rows(spec, *p.source);
    Tensor t{vector && rows == 1 ? std::vector<int64_t>{cols} : std::vector<int64_t>{rows, cols}, vector};
    const auto [at, added] = tensors_.emplace(p.hf_name, t);
    if (!added && (at->second.shape != t.shape || at->second.norm != t.norm)) {
      fail("internal: manifest of ", model.info.name, " names HF tensor ", p.hf_name, " as ",
           at->second.norm ? "a vector " : "", shape_text(at->second.shape), " and, for ", spec.name, ", as ",
           t.norm ? "a vector " : "", shape_text(t.shape));
    }
  }

  struct Tensor {
    std::vector<int64_t> shape;
    bool norm;  // a vector: values near 1
  };
  uint64_t seed_;
  std::map<std::string, Tensor> tensors_;
};

}  // namespace

std::unique_ptr<TensorSource> open_random_source(const ModelDef& model, uint64_t seed) {
  return std::make_unique<RandomSource>(model, seed);
}

}  // namespace kiln
