#include "runtime/weights/gguf.hpp"

#include <bit>
#include <cstring>
#include <limits>
#include <type_traits>

#include "runtime/core/error.hpp"
#include "runtime/weights/shape.hpp"

namespace kiln {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF files kiln reads are little-endian");

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
// Smallest encodings, used to bound counts by the bytes left before allocating anything:
// a kv pair is key length (8) + value type (4) + at least one value byte; a tensor info is name
// length (8) + n_dims (4) + one dim (8) + type (4) + offset (8).
constexpr uint64_t kMinKvBytes = 13;
constexpr uint64_t kMinTensorInfoBytes = 32;

bool is_known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::FLOAT64); }

// Bytes one element of a scalar type occupies; strings: their minimum (the u64 length).
uint64_t min_encoded_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16: case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64: case GgufValueType::INT64: case GgufValueType::FLOAT64: return 8;
    case GgufValueType::STRING: return 8;
    case GgufValueType::ARRAY: return 12;
  }
  return 1;
}

bool is_unsigned(GgufValueType t) {
  return t == GgufValueType::UINT8 || t == GgufValueType::UINT16 || t == GgufValueType::UINT32 ||
         t == GgufValueType::UINT64;
}
bool is_signed(GgufValueType t) {
  return t == GgufValueType::INT8 || t == GgufValueType::INT16 || t == GgufValueType::INT32 ||
         t == GgufValueType::INT64;
}
bool is_float(GgufValueType t) { return t == GgufValueType::FLOAT32 || t == GgufValueType::FLOAT64; }

// A bounds-checked cursor over the file image. Every read names what it reads, so a truncated or
// lying file produces "origin: at byte P: <what> needs N bytes, only R remain".
class Reader {
 public:
  Reader(std::span<const std::byte> image, const std::string& origin) : image_(image), origin_(origin) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return image_.size() - pos_; }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining()) fail(origin_, ": at byte ", pos_, ": ", what, " needs ", n, " bytes, only ", remaining(), " remain");
  }

  template <typename T>
  T read(std::string_view what) {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, image_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view what) {
    const uint64_t len = read<uint64_t>(what);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(image_.data()) + pos_, len);
    pos_ += len;
    return s;
  }

 private:
  std::span<const std::byte> image_;
  const std::string& origin_;
  size_t pos_ = 0;
};

template <typename Stored, typename Wide>
std::vector<Wide> read_array(Reader& r, uint64_t count, const std::string& what) {
  std::vector<Wide> out;
  out.reserve(count);  // count was checked against the bytes left
  for (uint64_t i = 0; i < count; ++i) out.push_back(static_cast<Wide>(r.read<Stored>(what)));
  return out;
}

bool read_bool(Reader& r, const std::string& what, const std::string& origin) {
  const uint8_t b = r.read<uint8_t>(what);
  if (b > 1) fail(origin, ": ", what, ": BOOL byte is ", unsigned{b}, ", expected 0 or 1");
  return b == 1;
}

GgufValue read_value(Reader& r, GgufValueType type, const std::string& what, const std::string& origin) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufValueType::UINT8: v.data = uint64_t{r.read<uint8_t>(what)}; break;
    case GgufValueType::INT8: v.data = int64_t{r.read<int8_t>(what)}; break;
    case GgufValueType::UINT16: v.data = uint64_t{r.read<uint16_t>(what)}; break;
    case GgufValueType::INT16: v.data = int64_t{r.read<int16_t>(what)}; break;
    case GgufValueType::UINT32: v.data = uint64_t{r.read<uint32_t>(what)}; break;
    case GgufValueType::INT32: v.data = int64_t{r.read<int32_t>(what)}; break;
    case GgufValueType::UINT64: v.data = r.read<uint64_t>(what); break;
    case GgufValueType::INT64: v.data = r.read<int64_t>(what); break;
    case GgufValueType::FLOAT32: v.data = double{r.read<float>(what)}; break;
    case GgufValueType::FLOAT64: v.data = r.read<double>(what); break;
    case GgufValueType::BOOL: v.data = read_bool(r, what, origin); break;
    case GgufValueType::STRING: v.data = r.read_string(what); break;
    case GgufValueType::ARRAY: {
      const uint32_t elem = r.read<uint32_t>(what + " (array element type)");
      if (!is_known_value_type(elem)) fail(origin, ": ", what, ": unknown array element type ", elem, " (expected 0..12)");
      v.array_type = static_cast<GgufValueType>(elem);
      if (v.array_type == GgufValueType::ARRAY) {
        fail(origin, ": ", what, ": arrays of arrays are not supported (llama.cpp rejects them too)");
      }
      const uint64_t count = r.read<uint64_t>(what + " (array length)");
      if (count > r.remaining() / min_encoded_size(v.array_type)) {
        fail(origin, ": ", what, ": array of ", count, " ", gguf_value_type_name(v.array_type),
             " cannot fit in the ", r.remaining(), " bytes left in the file");
      }
      switch (v.array_type) {
        case GgufValueType::UINT8: v.data = read_array<uint8_t, uint64_t>(r, count, what); break;
        case GgufValueType::INT8: v.data = read_array<int8_t, int64_t>(r, count, what); break;
        case GgufValueType::UINT16: v.data = read_array<uint16_t, uint64_t>(r, count, what); break;
        case GgufValueType::INT16: v.data = read_array<int16_t, int64_t>(r, count, what); break;
        case GgufValueType::UINT32: v.data = read_array<uint32_t, uint64_t>(r, count, what); break;
        case GgufValueType::INT32: v.data = read_array<int32_t, int64_t>(r, count, what); break;
        case GgufValueType::UINT64: v.data = read_array<uint64_t, uint64_t>(r, count, what); break;
        case GgufValueType::INT64: v.data = read_array<int64_t, int64_t>(r, count, what); break;
        case GgufValueType::FLOAT32: v.data = read_array<float, double>(r, count, what); break;
        case GgufValueType::FLOAT64: v.data = read_array<double, double>(r, count, what); break;
        case GgufValueType::BOOL: {
          GgufValue::Bools bools;
          bools.reserve(count);
          for (uint64_t i = 0; i < count; ++i) bools.push_back(read_bool(r, what, origin) ? 1 : 0);
          v.data = std::move(bools);
          break;
        }
        case GgufValueType::STRING: {
          std::vector<std::string> strings;
          strings.reserve(count);
          for (uint64_t i = 0; i < count; ++i) strings.push_back(r.read_string(what));
          v.data = std::move(strings);
          break;
        }
        case GgufValueType::ARRAY: break;  // rejected above
      }
      break;
    }
  }
  return v;
}

}  // namespace

std::string_view gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8: return "UINT8";
    case GgufValueType::INT8: return "INT8";
    case GgufValueType::UINT16: return "UINT16";
    case GgufValueType::INT16: return "INT16";
    case GgufValueType::UINT32: return "UINT32";
    case GgufValueType::INT32: return "INT32";
    case GgufValueType::FLOAT32: return "FLOAT32";
    case GgufValueType::BOOL: return "BOOL";
    case GgufValueType::STRING: return "STRING";
    case GgufValueType::ARRAY: return "ARRAY";
    case GgufValueType::UINT64: return "UINT64";
    case GgufValueType::INT64: return "INT64";
    case GgufValueType::FLOAT64: return "FLOAT64";
  }
  return "?";
}

size_t GgufValue::array_size() const {
  return std::visit(
      [](const auto& d) -> size_t {
        using T = std::decay_t<decltype(d)>;
        if constexpr (std::is_same_v<T, std::string> || !requires { d.size(); }) {
          return 0;
        } else {
          return d.size();
        }
      },
      data);
}

std::string GgufValue::type_name() const {
  std::string name(gguf_value_type_name(type));
  if (type == GgufValueType::ARRAY) {
    name.append("[").append(gguf_value_type_name(array_type)).append("]");
  }
  return name;
}

int64_t GgufTensor::numel() const { return element_count(ne); }

GgufFile::GgufFile(const std::string& path) : file_(std::in_place, path), origin_(path) {
  parse_image(file_->bytes());
}

GgufFile GgufFile::parse(std::span<const std::byte> image, const std::string& origin) {
  GgufFile f;
  f.origin_ = origin;
  f.parse_image(image);
  return f;
}

void GgufFile::parse_image(std::span<const std::byte> image) {
  const std::string& origin = origin_;
  Reader r(image, origin);

  r.need(4, "magic");
  if (std::memcmp(image.data(), "GGUF", 4) != 0) {
    const auto* p = reinterpret_cast<const unsigned char*>(image.data());
    fail(origin, ": not a GGUF file (magic bytes ", unsigned{p[0]}, " ", unsigned{p[1]}, " ", unsigned{p[2]}, " ",
         unsigned{p[3]}, ", expected \"GGUF\")");
  }
  r.read<uint32_t>("magic");
  version_ = r.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3) {
    if (version_ != 0 && (version_ & 0xffffu) == 0) {
      fail(origin, ": GGUF version field is ", version_, ", which looks like a big-endian file (kiln reads little-endian GGUF v2/v3)");
    }
    fail(origin, ": unsupported GGUF version ", version_, " (expected 2 or 3)");
  }
  const uint64_t tensor_count = r.read<uint64_t>("tensor_count");
  const uint64_t kv_count = r.read<uint64_t>("kv_count");
  if (kv_count > r.remaining() / kMinKvBytes) {
    fail(origin, ": kv_count ", kv_count, " cannot fit in the ", r.remaining(), " bytes left in the file");
  }
  if (tensor_count > r.remaining() / kMinTensorInfoBytes) {
    fail(origin, ": tensor_count ", tensor_count, " cannot fit in the ", r.remaining(), " bytes left in the file");
  }

  kv_.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    const std::string key = r.read_string("key of kv pair " + std::to_string(i));
    if (key.empty()) fail(origin, ": kv pair ", i, " has an empty key");
    const std::string what = "value of key \"" + key + "\"";
    const uint32_t type = r.read<uint32_t>(what + " (type)");
    if (!is_known_value_type(type)) fail(origin, ": key \"", key, "\" has unknown value type ", type, " (expected 0..12)");
    GgufValue value = read_value(r, static_cast<GgufValueType>(type), what, origin);
    if (!kv_index_.emplace(key, kv_.size()).second) fail(origin, ": duplicate key \"", key, "\"");
    kv_.emplace_back(key, std::move(value));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufValueType::UINT32) {
      fail(origin, ": general.alignment is ", a->type_name(), ", expected UINT32");
    }
    alignment_ = std::get<uint64_t>(a->data);
    if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
      fail(origin, ": general.alignment ", alignment_, " is not a power of two");
    }
  } else {
    alignment_ = kDefaultAlignment;
  }

  struct Extent {
    uint64_t begin, end;
  };
  std::vector<Extent> extents;
  tensors_.reserve(tensor_count);
  extents.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensor t;
    t.name = r.read_string("name of tensor info " + std::to_string(i));
    if (t.name.empty()) fail(origin, ": tensor info ", i, " has an empty name");
    const std::string where = origin + ": tensor \"" + t.name + "\"";
    const uint32_t n_dims = r.read<uint32_t>("n_dims of tensor \"" + t.name + "\"");
    if (n_dims == 0 || n_dims > kMaxDims) fail(where, ": n_dims is ", n_dims, ", expected 1..", kMaxDims);
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = r.read<uint64_t>("ne of tensor \"" + t.name + "\"");
      if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(where, ": ne[", d, "] = ", static_cast<int64_t>(dim), " is not a positive dimension");
      }
      t.ne.push_back(static_cast<int64_t>(dim));
      if (__builtin_mul_overflow(numel, static_cast<int64_t>(dim), &numel)) {
        fail(where, ": element count overflows int64");
      }
    }
    const uint32_t type_id = r.read<uint32_t>("type of tensor \"" + t.name + "\"");
    const std::optional<GgmlType> type = ggml_type_from_id(type_id);
    if (!type) fail(where, ": unknown ggml type id ", type_id);
    t.type = *type;
    t.offset = r.read<uint64_t>("offset of tensor \"" + t.name + "\"");

    // ggml quantizes along rows: a row (ne[0] elements) must be whole blocks.
    const uint64_t block = ggml_block_size(t.type);
    if (static_cast<uint64_t>(t.ne[0]) % block != 0) {
      fail(where, ": ne[0] = ", t.ne[0], " is not a multiple of the ", ggml_type_name(t.type), " block size ", block);
    }
    uint64_t nbytes = 0;
    try {
      nbytes = ggml_tensor_bytes(t.type, numel);  // whole rows are whole blocks: only overflow can fail
    } catch (const Error& e) {
      fail(where, ": ", e.what());
    }
    if (t.offset % alignment_ != 0) {
      fail(where, ": offset ", t.offset, " is not a multiple of the alignment ", alignment_);
    }
    uint64_t end = 0;
    if (__builtin_add_overflow(t.offset, nbytes, &end)) fail(where, ": offset ", t.offset, " + size overflows");
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) fail(origin, ": duplicate tensor name \"", t.name, "\"");
    extents.push_back({t.offset, end});
    tensors_.push_back(std::move(t));
  }

  // Tensor data starts at the next multiple of the alignment. A file without tensors (vocab
  // only) may end before that padding.
  const uint64_t info_end = r.pos();
  const uint64_t data_start = (info_end + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_size = data_start <= image.size() ? image.size() - data_start : 0;
  uint64_t previous_end = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    GgufTensor& t = tensors_[i];
    if (extents[i].end > data_size) {
      fail(origin, ": tensor \"", t.name, "\" data [", extents[i].begin, ", ", extents[i].end,
           ") runs past the end of the data section (", data_size, " bytes)");
    }
    // Writers lay tensors out in declaration order; requiring it also rules out overlaps.
    if (extents[i].begin < previous_end) {
      fail(origin, ": tensor \"", t.name, "\" at offset ", extents[i].begin, " overlaps or precedes tensor \"",
           tensors_[i - 1].name, "\" (which ends at ", previous_end, "); offsets must increase in declaration order");
    }
    previous_end = extents[i].end;
    t.bytes = image.subspan(data_start + extents[i].begin, extents[i].end - extents[i].begin);
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufValue& GgufFile::require(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail(origin_, ": metadata key \"", key, "\" is missing");
  return *v;
}

std::string GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.type != GgufValueType::STRING) fail(origin_, ": metadata key \"", key, "\" is ", v.type_name(), ", expected STRING");
  return std::get<std::string>(v.data);
}

int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue& v = require(key);
  if (is_signed(v.type)) return std::get<int64_t>(v.data);
  if (is_unsigned(v.type)) {
    const uint64_t u = std::get<uint64_t>(v.data);
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(origin_, ": metadata key \"", key, "\" = ", u, " does not fit int64");
    }
    return static_cast<int64_t>(u);
  }
  fail(origin_, ": metadata key \"", key, "\" is ", v.type_name(), ", expected an integer");
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue& v = require(key);
  if (is_float(v.type)) return std::get<double>(v.data);
  if (is_signed(v.type)) return static_cast<double>(std::get<int64_t>(v.data));
  if (is_unsigned(v.type)) return static_cast<double>(std::get<uint64_t>(v.data));
  fail(origin_, ": metadata key \"", key, "\" is ", v.type_name(), ", expected a number");
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.type != GgufValueType::BOOL) fail(origin_, ": metadata key \"", key, "\" is ", v.type_name(), ", expected BOOL");
  return std::get<bool>(v.data);
}

const std::vector<std::string>& GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.type != GgufValueType::ARRAY || v.array_type != GgufValueType::STRING) {
    fail(origin_, ": metadata key \"", key, "\" is ", v.type_name(), ", expected ARRAY[STRING]");
  }
  return std::get<std::vector<std::string>>(v.data);
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.type == GgufValueType::ARRAY && is_signed(v.array_type)) return std::get<std::vector<int64_t>>(v.data);
  if (v.type == GgufValueType::ARRAY && is_unsigned(v.array_type)) {
    std::vector<int64_t> out;
    for (uint64_t u : std::get<std::vector<uint64_t>>(v.data)) {
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(origin_, ": metadata key \"", key, "\" holds ", u, ", which does not fit int64");
      }
      out.push_back(static_cast<int64_t>(u));
    }
    return out;
  }
  fail(origin_, ": metadata key \"", key, "\" is ", v.type_name(), ", expected an integer array");
}

std::vector<double> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.type == GgufValueType::ARRAY) {
    if (is_float(v.array_type)) return std::get<std::vector<double>>(v.data);
    if (is_signed(v.array_type)) {
      const auto& ints = std::get<std::vector<int64_t>>(v.data);
      return {ints.begin(), ints.end()};
    }
    if (is_unsigned(v.array_type)) {
      const auto& ints = std::get<std::vector<uint64_t>>(v.data);
      return {ints.begin(), ints.end()};
    }
  }
  fail(origin_, ": metadata key \"", key, "\" is ", v.type_name(), ", expected a number array");
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> out;
  out.reserve(kv_.size());
  for (const auto& [key, value] : kv_) out.push_back(key);
  return out;
}

}  // namespace kiln
