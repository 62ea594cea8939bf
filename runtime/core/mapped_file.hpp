// A read-only memory map of a whole file (RAII). Weight files are mapped, never read into
// heap copies: tensors are views into the mapping and are uploaded to the GPU from there.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace kiln {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path`; throws kiln::Error naming the path if it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kiln
