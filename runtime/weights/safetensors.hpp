// safetensors files: parse and validate (views into a mapping, no copies), sharded HF model
// directories, writing, and float element conversion.
//
// Format: u64 little-endian header length N, N bytes of JSON
//   {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the data buffer. Offsets are relative to the data buffer, and the tensors must cover it
// contiguously (no gaps, no overlap), as the reference implementation requires.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/dtype.hpp"
#include "runtime/core/mapped_file.hpp"

namespace kiln {

struct TensorView {  // a tensor inside a mapped file; no copy
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
  int64_t numel() const;
};

// Parses and validates a whole safetensors file image. `origin` names the file in errors.
// Tensors are returned in data-buffer order.
std::vector<TensorView> parse_safetensors(std::span<const std::byte> file, const std::string& origin,
                                          std::map<std::string, std::string>* metadata = nullptr);

class SafetensorsFile {  // owns the mapping
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(std::string_view name) const;  // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, size_t, std::less<>> position_;  // name -> index into tensors_
};

// An HF model directory: model.safetensors, or shards listed by model.safetensors.index.json
// (its "weight_map": tensor -> shard file). Errors name the directory/shard/tensor.
class SafetensorsDir {
 public:
  explicit SafetensorsDir(const std::string& dir);
  const TensorView* find(std::string_view name) const;
  std::vector<std::string> names() const;  // sorted
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*, std::less<>> tensors_;
};

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The header half of a tensor to write; its bytes come later from a producer.
struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};
// Writes a safetensors file whose data is produced one tensor at a time, in order:
// produce(i) returns tensor i's bytes (exactly its size), valid until the next call. A converter
// thus holds one tensor in memory, not the model. The file appears atomically (temp + rename).
void write_safetensors_streaming(const std::string& path, const std::vector<TensorSpec>& specs,
                                 const std::function<std::span<const std::byte>(size_t)>& produce,
                                 const std::map<std::string, std::string>& metadata = {});

// Element conversion of any float tensor (F32/F16/BF16/F64) to fp32 or bf16 (uint16_t bits,
// round to nearest even; F64 goes through fp32 as torch does). out.size() must equal numel().
void convert_to_f32(const TensorView& t, std::span<float> out);
void convert_to_bf16(const TensorView& t, std::span<uint16_t> out);
// Rows [first_row, first_row + out.size() / row length) of a float tensor as fp32, where a row
// is the last dimension (a 1-D tensor is one row). Bounds-checked; throws naming the tensor.
void convert_rows_to_f32(const TensorView& t, int64_t first_row, std::span<float> out);

}  // namespace kiln
