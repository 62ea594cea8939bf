// GGUF (versions 2 and 3): metadata key/values and tensor infos, validated, with tensors as
// views into the mapping.
//
// Layout: "GGUF", u32 version, u64 tensor_count, u64 kv_count, kv pairs (string key, u32 value
// type, value), tensor infos (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset),
// padding to general.alignment (default 32), tensor data. Strings are u64 length + bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runtime/core/mapped_file.hpp"
#include "runtime/weights/ggml_type.hpp"

namespace kiln {

enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType type);

// One metadata value. Scalars are widened to their family (unsigned -> uint64_t, signed ->
// int64_t, float -> double); `type` keeps the stored type. Arrays hold scalars or strings of one
// element type (`array_type`); arrays of arrays are rejected when parsing, as llama.cpp does.
struct GgufValue {
  using Bools = std::vector<uint8_t>;  // not vector<bool>: plain storage, one byte per element
  using Data = std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<uint64_t>,
                            std::vector<int64_t>, std::vector<double>, Bools, std::vector<std::string>>;
  GgufValueType type = GgufValueType::UINT8;
  GgufValueType array_type = GgufValueType::UINT8;  // meaningful when type == ARRAY
  Data data;

  size_t array_size() const;  // 0 for scalars
  std::string type_name() const;  // "UINT32", "ARRAY[STRING]"
};

struct GgufTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;           // ggml order: ne[0] is the contiguous dimension
  uint64_t offset;                   // relative to the data section
  std::span<const std::byte> bytes;  // the tensor's data inside the mapping
  int64_t numel() const;
};

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);  // maps + validates
  // Parses an image the caller keeps alive (no ownership); `origin` names it in errors.
  static GgufFile parse(std::span<const std::byte> image, const std::string& origin);

  const std::string& origin() const { return origin_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const GgufValue* find(std::string_view key) const;
  // Typed getters throw naming the file and key when missing or of another type.
  std::string get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;   // any integer type
  double get_float(std::string_view key) const;  // float types (and integers)
  bool get_bool(std::string_view key) const;
  const std::vector<std::string>& get_string_array(std::string_view key) const;  // valid while *this is
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<double> get_float_array(std::string_view key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;
  std::vector<std::string> keys() const;  // in file order

 private:
  GgufFile() = default;
  void parse_image(std::span<const std::byte> image);
  const GgufValue& require(std::string_view key) const;

  std::optional<MappedFile> file_;  // set when this object owns the mapping
  std::string origin_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace kiln
