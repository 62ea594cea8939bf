#include "runtime/model/weight_loader.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "runtime/core/error.hpp"
#include "runtime/core/hash.hpp"
#include "runtime/core/parallel.hpp"
#include "runtime/weights/float_convert.hpp"
#include "runtime/weights/shape.hpp"

namespace kiln {

std::byte* HostSink::allocate(int64_t bytes) {
  storage_.assign(static_cast<size_t>(bytes), std::byte{0});
  return storage_.data();
}

void HostSink::write(std::byte* dst, const void* src, int64_t bytes) { std::memcpy(dst, src, static_cast<size_t>(bytes)); }

namespace {

// One kiln tensor: a manifest entry at one layer (layer -1 for whole-model weights).
struct Instance {
  const WeightSpec* spec;
  int64_t layer;
  int64_t offset = 0;  // bytes into the block
  std::string key() const { return layer < 0 ? spec->name : std::string(spec->name) + " of layer " + std::to_string(layer); }
};

std::string substitute(std::string text, const std::string& pattern, int64_t value) {
  for (size_t at; (at = text.find(pattern)) != std::string::npos;) text.replace(at, pattern.size(), std::to_string(value));
  return text;
}

// Rows × cols view of a shape: [d0, ..., dn] -> [d0·…·d(n-1), dn].
std::pair<int64_t, int64_t> as_rows(const std::vector<int64_t>& shape) {
  if (shape.empty()) return {1, 1};
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  return {rows, shape.back()};
}

// A source piece resolved to one concrete HF tensor (layer and expert substituted).
struct Piece {
  std::string name;
  const WeightSource* source;
};

std::vector<Piece> expand_layout(const WeightSpec& spec, const std::vector<WeightSource>& layout, int64_t layer) {
  bool per_expert = false;
  for (const auto& s : layout) per_expert |= std::string(s.hf_name).find("{E}") != std::string::npos;
  std::vector<Piece> pieces;
  const int64_t experts = per_expert ? spec.experts : 1;
  for (int64_t e = 0; e < experts; ++e) {
    for (const auto& s : layout) pieces.push_back({substitute(substitute(s.hf_name, "{L}", layer), "{E}", e), &s});
  }
  return pieces;
}

class Loader {
 public:
  Loader(const ModelDef& model, WeightFormat format, WeightSink& sink) : model_(model), format_(format), sink_(sink) {
    elem_ = format == WeightFormat::f32 ? 4 : 2;
    for (const WeightSpec& spec : *model.weights) {
      if (spec.per_layer) {
        for (int64_t l = spec.layer_first; l < spec.layer_last; ++l) instances_.push_back({&spec, l});
      } else {
        instances_.push_back({&spec, -1});
      }
    }
  }

  // Allocates the block (tied weights take no bytes) and records every instance's offset.
  void allocate() {
    int64_t total = 0;
    for (Instance& inst : instances_) {
      if (is_tied(inst)) continue;
      inst.offset = total;
      total += (inst.spec->numel() * elem_ + 255) / 256 * 256;
    }
    block_ = sink_.allocate(total);
    result_.bytes = total;
  }

  LoadedWeights load(const TensorSource& source) {
    source_ = &source;
    // Resolve every layout first, so all missing / mis-shaped tensors surface before any work.
    std::vector<std::vector<Piece>> chosen(instances_.size());
    for (size_t i = 0; i < instances_.size(); ++i) chosen[i] = resolve(instances_[i]);
    check_unused();
    allocate();
    for (size_t i = 0; i < instances_.size(); ++i) {
      if (!chosen[i].empty()) fill(instances_[i], chosen[i]);
    }
    finish();
    return std::move(result_);
  }

  LoadedWeights randomize(uint64_t seed) {
    allocate();
    for (const Instance& inst : instances_) {
      if (!is_tied(inst)) fill_random(inst, seed);
    }
    finish();
    return std::move(result_);
  }

 private:
  bool is_tied(const Instance& inst) const {
    if (inst.spec->tied_to[0] == '\0') return false;
    if (source_ == nullptr) return true;  // random weights: tie as the model is tied
    for (const auto& layout : inst.spec->layouts) {
      bool complete = true;
      for (const Piece& p : expand_layout(*inst.spec, layout, inst.layer)) complete &= source_->shape(p.name).has_value();
      if (complete) return false;
    }
    return true;
  }

  std::vector<Piece> resolve(const Instance& inst) {
    const WeightSpec& spec = *inst.spec;
    std::string missing;
    for (const auto& layout : spec.layouts) {
      std::vector<Piece> pieces = expand_layout(spec, layout, inst.layer);
      std::string absent;
      for (const Piece& p : pieces) {
        if (!source_->shape(p.name)) absent += (absent.empty() ? "" : ", ") + p.name;
      }
      if (absent.empty()) {
        check_shapes(inst, pieces);
        for (const Piece& p : pieces) used_.insert(p.name);
        return pieces;
      }
      missing += (missing.empty() ? "" : "; or ") + absent;
    }
    if (spec.tied_to[0] != '\0') return {};
    fail(source_->describe(), ": missing tensor(s) ", missing, " (needed for ", inst.key(), ")");
  }

  void check_shapes(const Instance& inst, const std::vector<Piece>& pieces) const {
    const auto [kiln_rows, cols] = as_rows(inst.spec->shape);
    int64_t rows = 0;
    for (const Piece& p : pieces) {
      const std::vector<int64_t> shape = *source_->shape(p.name);
      const auto [src_rows, src_cols] = as_rows(shape);
      const WeightSource& s = *p.source;
      const int64_t want_rows = s.groups > 1 ? s.groups * s.group_stride : s.row_begin + s.rows;
      if (src_cols != cols || src_rows != want_rows) {
        fail(source_->describe(), ": tensor ", p.name, " has shape ", shape_text(shape), "; expected ", want_rows,
             " rows of ", cols, " values (for ", inst.key(), ", shape ", shape_text(inst.spec->shape), ")");
      }
      rows += s.rows * s.groups;
    }
    if (rows != kiln_rows) fail("internal: manifest of ", inst.key(), " stacks ", rows, " rows, expected ", kiln_rows);
  }

  // Every tensor in the checkpoint must be used: an unused one means a different model.
  void check_unused() const {
    std::vector<std::string> unused;
    for (const std::string& name : source_->names()) {
      if (used_.count(name) || name.ends_with("rotary_emb.inv_freq")) continue;
      if (name == "lm_head.weight" && tied_lm_head()) continue;  // some exporters write the tied copy
      unused.push_back(name);
    }
    if (unused.empty()) return;
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 8; ++i) list += (i ? ", " : "") + unused[i];
    if (unused.size() > 8) list += ", … (" + std::to_string(unused.size()) + " in all)";
    fail(source_->describe(), ": tensor(s) the model ", model_.info.name, " does not use: ", list,
         " — is this checkpoint for another model?");
  }

  bool tied_lm_head() const {
    for (const WeightSpec& spec : *model_.weights) {
      if (std::string(spec.name) == "lm_head") return spec.tied_to[0] != '\0';
    }
    return false;
  }

  void fill(const Instance& inst, const std::vector<Piece>& pieces) {
    const int64_t cols = as_rows(inst.spec->shape).second;
    std::byte* dst = block_ + inst.offset;
    constexpr int64_t kChunkValues = 1 << 22;
    const int64_t chunk_rows = std::max<int64_t>(1, kChunkValues / cols);
    for (const Piece& p : pieces) {
      const WeightSource& s = *p.source;
      for (int64_t g = 0; g < s.groups; ++g) {
        const int64_t first = s.row_begin + g * s.group_stride;
        for (int64_t r = 0; r < s.rows; r += chunk_rows) {
          const int64_t n = std::min(chunk_rows, s.rows - r);
          write_rows(p.name, first + r, n, cols, dst);
          dst += n * cols * elem_;
        }
      }
    }
    result_.table.set(inst.spec->name, inst.layer, block_ + inst.offset);
    ++result_.tensors;
  }

  // A NaN or infinite weight makes every logit NaN, and every request end with no token: name the
  // tensor and the place instead. Checked on the values as read (bf16 bits or fp32), first with a
  // branch-free pass over the exponent bits (vectorized: loading stays memory-bound).
  void check_finite(const std::string& name, int64_t first_row, int64_t cols, const uint16_t* bf16, const float* f32,
                    int64_t values) const {
    bool bad = false;
    if (bf16 != nullptr) {
      for (int64_t i = 0; i < values; ++i) bad |= (bf16[i] & 0x7F80) == 0x7F80;
    } else {
      const uint32_t* bits = reinterpret_cast<const uint32_t*>(f32);
      for (int64_t i = 0; i < values; ++i) bad |= (bits[i] & 0x7F800000u) == 0x7F800000u;
    }
    if (!bad) return;
    for (int64_t i = 0; i < values; ++i) {
      float v = f32 != nullptr ? f32[i] : 0.0f;
      if (bf16 != nullptr) bf16_elements_to_f32(reinterpret_cast<const std::byte*>(bf16 + i), std::span<float>(&v, 1));
      if (std::isfinite(v)) continue;
      fail(source_->describe(), ": tensor ", name, " holds ", std::isnan(v) ? "NaN" : "Inf", " at row ",
           first_row + i / cols, ", column ", i % cols, "; the checkpoint is corrupt");
    }
  }

  void write_rows(const std::string& name, int64_t first, int64_t rows, int64_t cols, std::byte* dst) {
    const int64_t values = rows * cols;
    if (format_ == WeightFormat::bf16) {
      if (const uint16_t* raw = source_->bf16_rows(name, first)) {
        check_finite(name, first, cols, raw, nullptr, values);
        sink_.write(dst, raw, values * 2);  // stored as bf16 already: straight from the mapping
        return;
      }
    }
    staging_f32_.resize(static_cast<size_t>(values));
    source_->read_rows(name, first, rows, staging_f32_.data());
    check_finite(name, first, cols, nullptr, staging_f32_.data(), values);
    if (format_ == WeightFormat::f32) {
      sink_.write(dst, staging_f32_.data(), values * 4);
      return;
    }
    staging_bf16_.resize(static_cast<size_t>(values));
    f32_elements_to_bf16(staging_f32_, staging_bf16_);
    sink_.write(dst, staging_bf16_.data(), values * 2);
  }

  void fill_random(const Instance& inst, uint64_t seed) {
    const int64_t n = inst.spec->numel();
    const bool vector = inst.spec->shape.size() == 1;
    uint64_t h = seed ^ kGoldenGamma;
    for (const char* c = inst.spec->name; *c; ++c) h = (h ^ static_cast<uint8_t>(*c)) * 0x100000001b3ull;
    h ^= static_cast<uint64_t>(inst.layer + 1) * 0xbf58476d1ce4e5b9ull;
    staging_f32_.resize(static_cast<size_t>(n));
    parallel_for(n, 1 << 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const uint64_t z = mix64(h + static_cast<uint64_t>(i) * kGoldenGamma);  // splitmix64
        const float u = static_cast<float>(z >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;  // [-1, 1)
        staging_f32_[i] = vector ? 1.0f + 0.1f * u : 0.02f * std::sqrt(3.0f) * u;
      }
    });
    std::byte* dst = block_ + inst.offset;
    if (format_ == WeightFormat::f32) {
      sink_.write(dst, staging_f32_.data(), n * 4);
    } else {
      staging_bf16_.resize(static_cast<size_t>(n));
      f32_elements_to_bf16(staging_f32_, staging_bf16_);
      sink_.write(dst, staging_bf16_.data(), n * 2);
    }
    result_.table.set(inst.spec->name, inst.layer, dst);
    ++result_.tensors;
  }

  // Tied weights point at their target (loaded above).
  void finish() {
    for (const Instance& inst : instances_) {
      if (is_tied(inst)) result_.table.set(inst.spec->name, inst.layer, result_.table.get(inst.spec->tied_to, inst.layer));
    }
  }

  const ModelDef& model_;
  WeightFormat format_;
  WeightSink& sink_;
  int64_t elem_ = 4;
  const TensorSource* source_ = nullptr;
  std::vector<Instance> instances_;
  std::set<std::string> used_;
  std::byte* block_ = nullptr;
  std::vector<float> staging_f32_;
  std::vector<uint16_t> staging_bf16_;
  LoadedWeights result_;
};

}  // namespace

LoadedWeights load_weights(const ModelDef& model, const TensorSource& source, WeightFormat format, WeightSink& sink) {
  return Loader(model, format, sink).load(source);
}

LoadedWeights random_weights(const ModelDef& model, uint64_t seed, WeightFormat format, WeightSink& sink) {
  return Loader(model, format, sink).randomize(seed);
}

}  // namespace kiln
