// TensorSource over an HF model directory (runtime/weights/safetensors.hpp does the parsing).
//
// FP8 checkpoints (the layout of the published Qwen3 and DeepSeek FP8 models: config.json's
// quantization_config {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}) store
// a matrix W as F8_E4M3 with W_scale_inv beside it, one scale per block of rows × columns (the last
// blocks may be partial): W[r][c] = fp8[r][c] × W_scale_inv[r / rows][c / columns]. The source
// reads such a pair as one fp32 tensor W and does not list W_scale_inv, so the loader sees the
// checkpoint's HF names as in a bf16 one.
#include <filesystem>
#include <set>

#include "runtime/core/error.hpp"
#include "runtime/core/strict_json.hpp"
#include "runtime/model/tensor_source.hpp"
#include "runtime/weights/safetensors.hpp"

namespace kiln {

namespace {

constexpr std::string_view kScaleSuffix = "_scale_inv";

struct BlockShape {
  int64_t rows = 128, cols = 128;  // the published FP8 checkpoints' blocks, when config.json is silent
};

// quantization_config of DIR/config.json (when the directory has one): FP8 with its block shape, or
// an error for a quantization kiln does not read; nullopt when the config names none.
std::optional<BlockShape> fp8_block_shape(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  if (!std::filesystem::exists(path)) return std::nullopt;
  const nlohmann::json config = read_json_file(path);
  if (!config.is_object() || !config.contains("quantization_config")) return std::nullopt;
  const nlohmann::json& q = config["quantization_config"];
  const auto text = [&](const char* key) {
    return q.is_object() && q.contains(key) && q[key].is_string() ? q[key].get<std::string>() : std::string();
  };
  if (text("quant_method") != "fp8") {
    fail(path, ": quantization_config ", json_excerpt(q), " is not one kiln reads (quant_method \"fp8\" with fmt \"e4m3\"",
         " and block scales, as the published FP8 checkpoints; or a bf16 checkpoint)");
  }
  if (q.contains("fmt") && text("fmt") != "e4m3") fail(path, ": quantization_config.fmt ", json_excerpt(q["fmt"]), ", expected \"e4m3\"");
  BlockShape block;
  if (q.contains("weight_block_size")) {
    const nlohmann::json& b = q["weight_block_size"];
    const auto rows = b.is_array() && b.size() == 2 ? json_integer(b[0], 1, 1 << 20) : std::nullopt;
    const auto cols = b.is_array() && b.size() == 2 ? json_integer(b[1], 1, 1 << 20) : std::nullopt;
    if (!rows || !cols) {
      fail(path, ": quantization_config.weight_block_size ", json_excerpt(b), ", expected [rows, columns] (e.g. [128, 128])");
    }
    block = {*rows, *cols};
  }
  return block;
}

class SafetensorsSource final : public TensorSource {
 public:
  explicit SafetensorsSource(const std::string& dir) : block_(fp8_block_shape(dir)), dir_(dir) {
    for (const std::string& name : dir_.names()) {
      const TensorView& t = *dir_.find(name);
      if (t.dtype != DType::F8_E4M3) continue;
      check_fp8(t);
      scales_.insert(name + std::string(kScaleSuffix));
    }
  }

  std::string describe() const override { return "model directory " + dir_.dir(); }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const std::string& name : dir_.names()) {
      if (!scales_.count(name)) out.push_back(name);
    }
    return out;
  }
  std::optional<std::vector<int64_t>> shape(const std::string& name) const override {
    const TensorView* t = dir_.find(name);
    if (!t) return std::nullopt;
    return t->shape;
  }

  void read_rows(const std::string& name, int64_t first, int64_t count, float* out) const override {
    const TensorView& t = view(name);
    const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
    const std::span<float> rows(out, static_cast<size_t>(count * cols));
    convert_rows_to_f32(t, first, rows);
    if (t.dtype == DType::F8_E4M3) apply_block_scales(t, first, count, rows);
  }

  const uint16_t* bf16_rows(const std::string& name, int64_t first) const override {
    const TensorView& t = view(name);
    if (t.dtype != DType::BF16) return nullptr;
    const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
    if (first < 0 || first * cols > t.numel()) fail(describe(), ": row ", first, " is outside tensor ", name);
    return reinterpret_cast<const uint16_t*>(t.bytes.data()) + first * cols;
  }

  std::optional<Fp8Blocks> fp8_blocks(const std::string& name) const override {
    const TensorView* t = dir_.find(name);
    if (t == nullptr || t->dtype != DType::F8_E4M3) return std::nullopt;
    return Fp8Blocks{block_->rows, block_->cols};
  }

  std::span<const uint8_t> fp8_codes(const std::string& name, int64_t row) const override {
    const TensorView& t = view(name);
    if (t.dtype != DType::F8_E4M3) return {};
    if (row < 0 || row >= t.shape[0]) fail(describe(), ": row ", row, " is outside tensor ", name);
    const auto cols = static_cast<size_t>(t.shape[1]);
    return {reinterpret_cast<const uint8_t*>(t.bytes.data()) + static_cast<size_t>(row) * cols, cols};
  }

  void fp8_scales(const std::string& name, int64_t block_row, std::span<float> out) const override {
    const TensorView& s = view(name + std::string(kScaleSuffix));
    if (static_cast<int64_t>(out.size()) != s.shape[1]) {
      fail("internal: ", out.size(), " scales asked of ", s.name, ", whose rows hold ", s.shape[1]);
    }
    convert_rows_to_f32(s, block_row, out);  // bounds-checks the block row
  }

 private:
  const TensorView& view(const std::string& name) const {
    const TensorView* t = dir_.find(name);
    if (!t) fail(describe(), ": no tensor ", name);
    return *t;
  }

  // An FP8 matrix needs its scale tensor, one scale per block, in a float type.
  void check_fp8(const TensorView& t) const {
    const std::string scale_name = t.name + std::string(kScaleSuffix);
    if (!block_) {
      fail(describe(), ": tensor \"", t.name, "\" is F8_E4M3 but config.json has no quantization_config (expected ",
           "quant_method \"fp8\" with weight_block_size, as the published FP8 checkpoints)");
    }
    if (t.shape.size() != 2) fail(describe(), ": F8_E4M3 tensor \"", t.name, "\" has ", t.shape.size(), " dims, expected 2");
    const TensorView* s = dir_.find(scale_name);
    if (s == nullptr) {
      fail(describe(), ": F8_E4M3 tensor \"", t.name, "\" has no \"", scale_name, "\" (kiln reads FP8 with block scales)");
    }
    const std::vector<int64_t> want{(t.shape[0] + block_->rows - 1) / block_->rows,
                                    (t.shape[1] + block_->cols - 1) / block_->cols};
    if (s->shape != want) {
      fail(describe(), ": \"", scale_name, "\" has shape [", s->shape.empty() ? 0 : s->shape[0], ", ",
           s->shape.size() < 2 ? 0 : s->shape[1], "], expected [", want[0], ", ", want[1], "]: one scale per ",
           block_->rows, " × ", block_->cols, " block of \"", t.name, "\"");
    }
    if (s->dtype != DType::F32 && s->dtype != DType::BF16 && s->dtype != DType::F16) {
      fail(describe(), ": \"", scale_name, "\" is ", dtype_name(s->dtype), ", expected F32, BF16 or F16");
    }
  }

  void apply_block_scales(const TensorView& t, int64_t first, int64_t count, std::span<float> rows) const {
    const TensorView& s = *dir_.find(t.name + std::string(kScaleSuffix));
    const int64_t cols = t.shape[1], scale_cols = s.shape[1];
    std::vector<float> scale_row(static_cast<size_t>(scale_cols));
    int64_t loaded = -1;
    for (int64_t r = 0; r < count; ++r) {
      const int64_t block_row = (first + r) / block_->rows;
      if (block_row != loaded) {
        convert_rows_to_f32(s, block_row, scale_row);
        loaded = block_row;
      }
      float* row = rows.data() + r * cols;
      for (int64_t c = 0; c < cols; ++c) row[c] *= scale_row[static_cast<size_t>(c / block_->cols)];
    }
  }

  std::optional<BlockShape> block_;  // from config.json's quantization_config (read first: config before weights)
  SafetensorsDir dir_;
  std::set<std::string> scales_;     // the *_scale_inv tensors of FP8 matrices (not listed)
};

}  // namespace

std::unique_ptr<TensorSource> open_safetensors_source(const std::string& dir) {
  return std::make_unique<SafetensorsSource>(dir);
}

}  // namespace kiln
