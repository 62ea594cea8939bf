// Writing safetensors files, whole or one tensor at a time.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/core/error.hpp"
#include "runtime/weights/safetensors.hpp"

namespace kiln {
namespace {

int64_t spec_bytes(const std::string& path, const TensorSpec& spec) {
  int64_t n = static_cast<int64_t>(dtype_size(spec.dtype));
  for (int64_t d : spec.shape) {
    if (d < 0) fail(path, ": tensor \"", spec.name, "\" has negative dimension ", d);
    if (__builtin_mul_overflow(n, d, &n)) fail(path, ": tensor \"", spec.name, "\" byte size overflows int64");
  }
  return n;
}

// The header JSON, padded with spaces to a multiple of 8 bytes so the data buffer (and every
// tensor whose offset is a multiple of its element size) stays aligned in a mapping.
std::string build_header(const std::string& path, const std::vector<TensorSpec>& specs,
                         const std::map<std::string, std::string>& metadata, std::vector<int64_t>* sizes) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  int64_t offset = 0;
  for (const TensorSpec& spec : specs) {
    if (spec.name == "__metadata__") fail(path, ": \"__metadata__\" is reserved and cannot name a tensor");
    if (!seen.insert(spec.name).second) fail(path, ": tensor \"", spec.name, "\" is listed twice");
    const int64_t bytes = spec_bytes(path, spec);
    header[spec.name] = {{"dtype", std::string(dtype_name(spec.dtype))},
                         {"shape", spec.shape},
                         {"data_offsets", {offset, offset + bytes}}};
    sizes->push_back(bytes);
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

void write_safetensors_streaming(const std::string& path, const std::vector<TensorSpec>& specs,
                                 const std::function<std::span<const std::byte>(size_t)>& produce,
                                 const std::map<std::string, std::string>& metadata) {
  std::vector<int64_t> sizes;
  const std::string header = build_header(path, specs, metadata, &sizes);

  const std::string partial = path + ".partial";
  std::ofstream out(partial, std::ios::binary | std::ios::trunc);
  if (!out) fail(partial, ": cannot create");
  // Removes the partial file on any failure below; dismissed once it is renamed into place.
  struct PartialGuard {
    const std::string& name;
    bool armed = true;
    ~PartialGuard() {
      if (armed) std::remove(name.c_str());
    }
  } guard{partial};

  const uint64_t header_len = header.size();
  out.write(reinterpret_cast<const char*>(&header_len), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::span<const std::byte> bytes = produce(i);
    if (static_cast<int64_t>(bytes.size()) != sizes[i]) {
      fail(path, ": tensor \"", specs[i].name, "\" has ", bytes.size(), " bytes, its shape and dtype need ", sizes[i]);
    }
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) fail(partial, ": write failed (disk full?)");
  }
  out.close();
  if (!out) fail(partial, ": write failed on close");
  std::error_code ec;
  std::filesystem::rename(partial, path, ec);
  if (ec) fail(path, ": cannot move ", partial, " into place (", ec.message(), ")");
  guard.armed = false;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const TensorToWrite& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  write_safetensors_streaming(path, specs, [&](size_t i) { return tensors[i].bytes; }, metadata);
}

}  // namespace kiln
