#include "runtime/core/file_io.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/core/error.hpp"

namespace kiln {

std::string read_file(const std::string& path) {
  // A directory opens as a stream on Linux and then reads as empty: name the mistake instead.
  if (std::filesystem::is_directory(path)) fail(path, ": is a directory, expected a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) fail(path, ": read error");
  return buffer.str();
}

}  // namespace kiln
