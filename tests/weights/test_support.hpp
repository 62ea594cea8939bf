// Helpers for the weights tests (and the tokenizer tests, which build GGUF vocabularies):
// building binary images byte by byte (so malformed files are crafted in code, not committed),
// temporary directories, and locating optional real files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/core/error.hpp"
#include "runtime/weights/ggml_type.hpp"

namespace kiln::test {

// Matches a kiln::Error whose message contains every given fragment (e.g. the file and field).
class ErrorContains : public Catch::MatcherBase<kiln::Error> {
 public:
  explicit ErrorContains(std::vector<std::string> fragments) : fragments_(std::move(fragments)) {}
  bool match(const kiln::Error& e) const override {
    const std::string message = e.what();
    for (const std::string& f : fragments_) {
      if (message.find(f) == std::string::npos) return false;
    }
    return true;
  }
  std::string describe() const override {
    std::string d = "is a kiln::Error whose message contains";
    for (const std::string& f : fragments_) d += " \"" + f + "\"";
    return d;
  }

 private:
  std::vector<std::string> fragments_;
};

#define CHECK_KILN_ERROR(expr, ...) \
  CHECK_THROWS_MATCHES(expr, kiln::Error, kiln::test::ErrorContains({__VA_ARGS__}))

// Appends little-endian values to a byte image.
class ByteWriter {
 public:
  template <typename T>
  ByteWriter& put(T value) {
    const auto* p = reinterpret_cast<const std::byte*>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
    return *this;
  }
  ByteWriter& u8(uint8_t v) { return put(v); }
  ByteWriter& u32(uint32_t v) { return put(v); }
  ByteWriter& u64(uint64_t v) { return put(v); }
  ByteWriter& raw(std::string_view s) {
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    bytes_.insert(bytes_.end(), p, p + s.size());
    return *this;
  }
  ByteWriter& raw(std::span<const std::byte> b) {
    bytes_.insert(bytes_.end(), b.begin(), b.end());
    return *this;
  }
  ByteWriter& gguf_string(std::string_view s) { return u64(s.size()).raw(s); }
  ByteWriter& pad_to(size_t alignment) {
    bytes_.resize((bytes_.size() + alignment - 1) / alignment * alignment);
    return *this;
  }
  size_t size() const { return bytes_.size(); }
  std::vector<std::byte>& bytes() { return bytes_; }
  std::span<const std::byte> span() const { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

template <typename T>
std::vector<std::byte> to_bytes(const std::vector<T>& values) {
  std::vector<std::byte> out(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// convert_hf_to_gguf's permute of llama's q/k rows (`rows` × `cols`, over `heads`): the rows of a head
// viewed as (2, head_dim / 2) are stored transposed, so output row (h, i, s) is input row (h, s, i).
std::vector<float> permute_rows_like_llama_cpp(const std::vector<float>& hf, int64_t rows, int64_t cols, int64_t heads);

// `rows` GGUF rows of k values of a block type (of block_values values) whose blocks start with an
// fp16 scale (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1; Q4_K): scales in [0.001, 0.1), every other byte random
// (every quant the type has), the same for the same seed.
std::vector<std::byte> random_scaled_blocks(size_t block_bytes, int64_t rows, int64_t k, uint32_t seed,
                                            int64_t block_values = 32);

// random_scaled_blocks for a GGUF block type: its block size, a finite fp16 min where the type
// has one after d (random bytes there could be NaN: Q4_1's m = -d · u for u in [0, 16), a block's
// values spanning zero as ggml's quantizer makes them; Q4_K's dmin 0.01), and Q6_K's d (its last
// two bytes) finite too.
std::vector<std::byte> random_gguf_blocks(GgmlType type, int64_t rows, int64_t k, uint32_t seed);

// A random E4M3 code of any finite value (zeros, subnormals, ±448; not NaN, 0x7F / 0xFF).
uint8_t random_finite_e4m3(std::mt19937& rng);

// An [n, k] matrix in the GPU's FP8 layout (repack_fp8_row / set_fp8_scale) with random codes (every
// finite E4M3 code: zeros, subnormals, ±448) and per-block scales spread over [2^-12, 2^-4), and the
// values it holds (code · scale), the same for the same seed. `one_scale`: every block's scale the
// same (a matrix quantized at load, quant_repack.hpp's quantize_fp8).
struct Fp8Matrix {
  std::vector<std::byte> matrix;
  std::vector<float> values;
  float one_scale = 0.0f;  // with `one_scale`: that scale
};
Fp8Matrix random_fp8_matrix(int64_t n, int64_t k, uint32_t seed, bool one_scale = false);

// A GGUF image with knobs for every field, so each test breaks exactly one thing.
// GGUF tensor type ids as a crafted file stores them (GgufBuilder::tensor's type argument).
inline constexpr uint32_t kF32 = static_cast<uint32_t>(GgmlType::F32), kF16 = static_cast<uint32_t>(GgmlType::F16),
                          kQ8_0 = static_cast<uint32_t>(GgmlType::Q8_0), kQ4_K = static_cast<uint32_t>(GgmlType::Q4_K),
                          kIQ4_NL = static_cast<uint32_t>(GgmlType::IQ4_NL), kI64 = static_cast<uint32_t>(GgmlType::I64);

struct GgufBuilder {
  struct Tensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    uint64_t offset;
    std::vector<std::byte> data;  // placed at offset in the data section
  };
  std::string magic = "GGUF";
  uint32_t version = 3;
  std::optional<uint64_t> tensor_count;  // defaults to tensors.size()
  std::optional<uint64_t> kv_count;      // defaults to the number of kv pairs added
  uint64_t alignment = 32;               // used for padding; add general.alignment yourself
  ByteWriter kv_bytes;
  uint64_t kvs = 0;
  std::vector<Tensor> tensors;

  // One kv pair: key, value type, then the value written by the caller.
  ByteWriter& kv(std::string_view key, uint32_t type) {
    ++kvs;
    return kv_bytes.gguf_string(key).u32(type);
  }
  GgufBuilder& kv_u32(std::string_view key, uint32_t v) { kv(key, 4).u32(v); return *this; }
  GgufBuilder& kv_f32(std::string_view key, float v) { kv(key, 6).put(v); return *this; }
  GgufBuilder& kv_bool(std::string_view key, bool v) { kv(key, 7).u8(v ? 1 : 0); return *this; }
  GgufBuilder& kv_string(std::string_view key, std::string_view v) { kv(key, 8).gguf_string(v); return *this; }
  GgufBuilder& kv_string_array(std::string_view key, const std::vector<std::string>& v) {
    ByteWriter& w = kv(key, 9).u32(8).u64(v.size());
    for (const std::string& s : v) w.gguf_string(s);
    return *this;
  }
  GgufBuilder& kv_int32_array(std::string_view key, const std::vector<int32_t>& v) {
    ByteWriter& w = kv(key, 9).u32(5).u64(v.size());
    for (const int32_t x : v) w.put(x);
    return *this;
  }
  GgufBuilder& kv_f32_array(std::string_view key, const std::vector<float>& v) {
    ByteWriter& w = kv(key, 9).u32(6).u64(v.size());
    for (const float x : v) w.put(x);
    return *this;
  }
  // Adds a tensor after the previous one (offset aligned). `data` may be shorter than the
  // tensor's size to produce a truncated file.
  GgufBuilder& tensor(std::string name, std::vector<uint64_t> ne, uint32_t type, std::vector<std::byte> data) {
    uint64_t offset = 0;
    if (!tensors.empty()) {
      const Tensor& last = tensors.back();
      offset = (last.offset + last.data.size() + alignment - 1) / alignment * alignment;
    }
    tensors.push_back({std::move(name), std::move(ne), type, offset, std::move(data)});
    return *this;
  }
  std::vector<std::byte> build() const {
    ByteWriter w;
    w.raw(magic).u32(version).u64(tensor_count.value_or(tensors.size())).u64(kv_count.value_or(kvs));
    w.raw(kv_bytes.span());
    for (const Tensor& t : tensors) {
      w.gguf_string(t.name).u32(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) w.u64(d);
      w.u32(t.type).u64(t.offset);
    }
    if (tensors.empty()) return std::move(w.bytes());
    w.pad_to(alignment);
    const size_t data_start = w.size();
    for (const Tensor& t : tensors) {
      if (t.data.empty()) continue;  // tests with huge offsets give no data: never allocate for them
      std::vector<std::byte>& b = w.bytes();
      if (b.size() < data_start + t.offset + t.data.size()) b.resize(data_start + t.offset + t.data.size());
      std::memcpy(b.data() + data_start + t.offset, t.data.data(), t.data.size());
    }
    return std::move(w.bytes());
  }
};

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

void write_file(const std::string& path, std::span<const std::byte> bytes);
void write_file(const std::string& path, std::string_view text);

// The SmolLM2 GGUF in the kiln cache ($KILN_CACHE, else ~/.cache/kiln), when tools/fetch-smollm2
// has put it there.
std::optional<std::string> cached_smollm2();

}  // namespace kiln::test
