// TensorSource over an HF model directory (runtime/weights/safetensors.hpp does the parsing).
#include "runtime/core/error.hpp"
#include "runtime/model/tensor_source.hpp"
#include "runtime/weights/safetensors.hpp"

namespace kiln {

namespace {

class SafetensorsSource final : public TensorSource {
 public:
  explicit SafetensorsSource(const std::string& dir) : dir_(dir) {}

  std::string describe() const override { return "model directory " + dir_.dir(); }
  std::vector<std::string> names() const override { return dir_.names(); }
  std::optional<std::vector<int64_t>> shape(const std::string& name) const override {
    const TensorView* t = dir_.find(name);
    if (!t) return std::nullopt;
    return t->shape;
  }

  void read_rows(const std::string& name, int64_t first, int64_t count, float* out) const override {
    const TensorView& t = view(name);
    const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
    convert_rows_to_f32(t, first, std::span<float>(out, static_cast<size_t>(count * cols)));
  }

  const uint16_t* bf16_rows(const std::string& name, int64_t first) const override {
    const TensorView& t = view(name);
    if (t.dtype != DType::BF16) return nullptr;
    const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
    if (first < 0 || first * cols > t.numel()) fail(describe(), ": row ", first, " is outside tensor ", name);
    return reinterpret_cast<const uint16_t*>(t.bytes.data()) + first * cols;
  }

 private:
  const TensorView& view(const std::string& name) const {
    const TensorView* t = dir_.find(name);
    if (!t) fail(describe(), ": no tensor ", name);
    return *t;
  }
  SafetensorsDir dir_;
};

}  // namespace

std::unique_ptr<TensorSource> open_safetensors_source(const std::string& dir) {
  return std::make_unique<SafetensorsSource>(dir);
}

}  // namespace kiln
