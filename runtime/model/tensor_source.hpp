// Where weights come from, by HF tensor name: an HF model directory (safetensors), a GGUF file
// (dequantized, Llama q/k rows un-permuted), or deterministic random values for benchmarks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/model/model_def.hpp"
#include "runtime/weights/ggml_type.hpp"

namespace kiln {

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual std::string describe() const = 0;  // names the source in errors: "model directory X"
  virtual std::vector<std::string> names() const = 0;
  virtual std::optional<std::vector<int64_t>> shape(const std::string& name) const = 0;
  // Rows [first, first + count) of the tensor viewed as [rows, last dim], converted to fp32.
  virtual void read_rows(const std::string& name, int64_t first, int64_t count, float* out) const = 0;
  // The same rows in place when the tensor is stored as bf16 (no conversion needed), else nullptr.
  virtual const uint16_t* bf16_rows(const std::string& name, int64_t first) const { return nullptr; }
  // A GGUF file's tensor: its block type, and HF row `row` as the file stores it (whole blocks;
  // llama.cpp's q/k permutation undone by row). nullopt / empty for other sources and for tensors
  // rebuilt from several GGUF tensors.
  virtual std::optional<GgmlType> block_type(const std::string& name) const { return std::nullopt; }
  virtual std::span<const std::byte> stored_row(const std::string& name, int64_t row) const { return {}; }
  // An FP8 checkpoint's matrix (E4M3 codes with a scale per block of rows × columns): its block
  // shape, row `row`'s codes as stored, and the scales of block row `block_row` as fp32 (`out`: one
  // per block column). nullopt / empty / nothing for other tensors and sources; read_rows gives the
  // values (code × scale) of every tensor.
  struct Fp8Blocks {
    int64_t rows, cols;
  };
  virtual std::optional<Fp8Blocks> fp8_blocks(const std::string& name) const { return std::nullopt; }
  virtual std::span<const uint8_t> fp8_codes(const std::string& name, int64_t row) const { return {}; }
  virtual void fp8_scales(const std::string& name, int64_t block_row, std::span<float> out) const {}
};

// An HF model directory: model.safetensors, or shards listed in model.safetensors.index.json.
std::unique_ptr<TensorSource> open_safetensors_source(const std::string& dir);

// A GGUF file (llama, qwen3 or deepseek2 architecture), dequantized to fp32 at load, llama q/k rows
// un-permuted. Its metadata must match the config the model was generated from (a mismatch is an
// error naming the field and both values).
std::unique_ptr<TensorSource> open_gguf_source(const std::string& path, const ModelInfo& model);

}  // namespace kiln
