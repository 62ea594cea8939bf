// A fresh temporary folder, removed with everything in it when the object goes away, so tests that
// write files leave nothing behind. Header-only.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

namespace kiln::test {

class TempDir {
 public:
  // <system temp>/<prefix>-<pid>-<n>: unique across processes and within one.
  explicit TempDir(const std::string& prefix) {
    static std::atomic<int> made{0};
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(++made));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;  // nothing to do about a folder that cannot be removed
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` inside the folder (its parent folders created), the file not written.
  std::string file(const std::string& name) const {
    const std::filesystem::path p = path_ / name;
    std::filesystem::create_directories(p.parent_path());
    return p.string();
  }
  // Writes `text` to `name` inside the folder; returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = file(name);
    std::ofstream(p) << text;
    return p;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace kiln::test
