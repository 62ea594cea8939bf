#include "runtime/weights/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "runtime/core/error.hpp"
#include "runtime/weights/shape.hpp"
#include "runtime/core/strict_json.hpp"

namespace kiln {
namespace {

using json = nlohmann::json;
static_assert(std::endian::native == std::endian::little, "safetensors and GGUF are little-endian");

constexpr std::string_view kMetadataKey = "__metadata__";

// safetensors dtype names kiln reads. Others the format defines (U16, U32, U64, F8_E5M2 and the
// other F8_*, F6_*, F4, C64) are rejected as unsupported: no model kiln runs stores them.
bool dtype_from_name(std::string_view name, DType* out) {
  static constexpr std::pair<std::string_view, DType> kNames[] = {
      {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16}, {"F64", DType::F64},
      {"I64", DType::I64}, {"I32", DType::I32}, {"I16", DType::I16},   {"I8", DType::I8},
      {"U8", DType::U8},   {"BOOL", DType::BOOL}, {"F8_E4M3", DType::F8_E4M3},
  };
  for (const auto& [n, t] : kNames) {
    if (n == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

// A JSON integer >= 0 that fits int64 (nlohmann stores 2.0 and 1e3 as floats: rejected).
bool as_non_negative_int(const json& j, int64_t* out) {
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = v;
    return true;
  }
  return false;
}

struct Entry {
  TensorView view;
  int64_t begin = 0;
  int64_t end = 0;
};

Entry parse_entry(const std::string& origin, const std::string& name, const json& j) {
  const std::string where = origin + ": tensor \"" + name + "\"";
  if (!j.is_object()) fail(where, ": entry must be a JSON object, got ", j.type_name());
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!j.contains(field)) fail(where, ": missing field \"", field, "\"");
  }
  Entry e;
  e.view.name = name;

  const json& dtype = j["dtype"];
  if (!dtype.is_string()) fail(where, ": \"dtype\" must be a string, got ", dtype.type_name());
  if (!dtype_from_name(dtype.get<std::string>(), &e.view.dtype)) {
    fail(where, ": unsupported dtype \"", dtype.get<std::string>(),
         "\" (expected one of F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL)");
  }

  const json& shape = j["shape"];
  if (!shape.is_array()) fail(where, ": \"shape\" must be an array, got ", shape.type_name());
  int64_t numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t dim = 0;
    if (!as_non_negative_int(shape[i], &dim)) {
      fail(where, ": shape[", i, "] = ", shape[i].dump(), " is not a non-negative integer");
    }
    e.view.shape.push_back(dim);
    if (__builtin_mul_overflow(numel, dim, &numel)) fail(where, ": shape ", shape.dump(), " overflows int64");
  }
  int64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(dtype_size(e.view.dtype)), &nbytes)) {
    fail(where, ": byte size of shape ", shape.dump(), " overflows int64");
  }

  const json& offsets = j["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    fail(where, ": \"data_offsets\" must be an array [begin, end], got ", offsets.dump());
  }
  if (!as_non_negative_int(offsets[0], &e.begin) || !as_non_negative_int(offsets[1], &e.end)) {
    fail(where, ": \"data_offsets\" ", offsets.dump(), " must be non-negative integers");
  }
  if (e.end < e.begin) fail(where, ": data_offsets end ", e.end, " < begin ", e.begin);
  if (e.end - e.begin != nbytes) {
    fail(where, ": data_offsets ", offsets.dump(), " span ", e.end - e.begin, " bytes, but shape ", shape.dump(),
         " of ", dtype_name(e.view.dtype), " needs ", nbytes);
  }
  return e;
}

}  // namespace

int64_t TensorView::numel() const { return element_count(shape); }

std::vector<TensorView> parse_safetensors(std::span<const std::byte> file, const std::string& origin,
                                          std::map<std::string, std::string>* metadata) {
  if (file.size() < 8) {
    fail(origin, ": file is ", file.size(), " bytes, shorter than the 8-byte safetensors header length");
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, file.data(), 8);
  // The format's own limit (the reference implementation's MAX_HEADER_SIZE): a header is parsed
  // into a document several times its size, so a multi-gigabyte one must not be parsed at all.
  constexpr uint64_t kMaxHeaderBytes = 100'000'000;
  if (header_len > kMaxHeaderBytes) {
    fail(origin, ": header length ", header_len, " is over the format's limit of ", kMaxHeaderBytes, " bytes");
  }
  if (header_len > file.size() - 8) {
    fail(origin, ": header length ", header_len, " runs past the end of the file (", file.size() - 8,
         " bytes follow the length)");
  }
  const std::string_view header_text(reinterpret_cast<const char*>(file.data()) + 8, header_len);
  const json header = parse_json_strict(header_text, origin + " (safetensors header)");
  if (!header.is_object()) fail(origin, ": safetensors header must be a JSON object, got ", header.type_name());

  const std::span<const std::byte> data = file.subspan(8 + header_len);
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      if (!value.is_object()) fail(origin, ": \"__metadata__\" must be an object of strings, got ", value.type_name());
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) {
          fail(origin, ": \"__metadata__\" value of \"", key, "\" must be a string, got ", text.type_name());
        }
        if (metadata != nullptr) (*metadata)[key] = text.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(origin, name, value));
  }

  // The tensors must tile the data buffer exactly: sorted by offset, each starts where the
  // previous ended, and the last ends at the buffer's end.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t covered = 0;
  const Entry* previous = nullptr;
  for (Entry& e : entries) {
    if (static_cast<uint64_t>(e.end) > data.size()) {
      fail(origin, ": tensor \"", e.view.name, "\" data_offsets [", e.begin, ", ", e.end,
           "] run past the end of the data buffer (", data.size(), " bytes)");
    }
    if (e.begin < covered) {
      fail(origin, ": tensor \"", e.view.name, "\" data_offsets [", e.begin, ", ", e.end, "] overlap tensor \"",
           previous->view.name, "\" (ends at ", covered, ")");
    }
    if (e.begin > covered) {
      fail(origin, ": gap in the data buffer: bytes [", covered, ", ", e.begin, ") belong to no tensor (before \"",
           e.view.name, "\")");
    }
    e.view.bytes = data.subspan(static_cast<size_t>(e.begin), static_cast<size_t>(e.end - e.begin));
    covered = e.end;
    previous = &e;
  }
  if (static_cast<uint64_t>(covered) != data.size()) {
    fail(origin, ": data buffer has ", data.size(), " bytes but the tensors cover only ", covered);
  }

  std::vector<TensorView> views;
  views.reserve(entries.size());
  for (Entry& e : entries) views.push_back(std::move(e.view));
  return views;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  tensors_ = parse_safetensors(file_.bytes(), path, &metadata_);
  for (size_t i = 0; i < tensors_.size(); ++i) position_.emplace(tensors_[i].name, i);
}

const TensorView* SafetensorsFile::find(std::string_view name) const {
  const auto it = position_.find(name);
  return it == position_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace kiln
