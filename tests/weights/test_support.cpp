#include "test_support.hpp"

#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace kiln::test {

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "kiln-test-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_file(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void write_file(const std::string& path, std::string_view text) {
  write_file(path, std::as_bytes(std::span(text.data(), text.size())));
}

std::optional<std::string> cached_smollm2() {
  std::filesystem::path cache;
  if (const char* env = std::getenv("KILN_CACHE"); env != nullptr && *env != '\0') {
    cache = env;
  } else if (const char* home = std::getenv("HOME"); home != nullptr) {
    cache = std::filesystem::path(home) / ".cache" / "kiln";
  } else {
    return std::nullopt;
  }
  const std::filesystem::path file = cache / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (std::filesystem::is_regular_file(file)) return file.string();
  return std::nullopt;
}

}  // namespace kiln::test
