// Shared by the libFuzzer harnesses (tests/fuzz, built by tools/fuzz): bad input must end in
// kiln::Error, and anything else (a crash, a sanitizer report, another exception, a hang, a leak)
// is a finding. Loaders that take a path get the input as a file.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "runtime/core/error.hpp"

namespace kiln::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A folder of this process's own (in /dev/shm when there is one: no disk writes per input),
// emptied first and removed at exit: a folder an earlier run with the same process id left (a
// crash, or a harness killed at its time limit) must not lend its files to this one. A
// fuzz_config_hf run's config.json once did: fuzz_requests' tokenizer read it beside its
// tokenizer.json and threw outside the harness's body.
inline const std::filesystem::path& scratch_dir() {
  struct Scratch {
    std::filesystem::path dir;
    Scratch() {
      const std::filesystem::path base =
          std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
      dir = base / ("kiln-fuzz-" + std::to_string(::getpid()));
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
    }
    ~Scratch() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  };
  static const Scratch scratch;
  return scratch.dir;
}

// Writes the input to scratch_dir()/name; returns its path.
inline std::string write_input(const std::string& name, std::string_view bytes) {
  const std::string path = (scratch_dir() / name).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// Runs `body`; kiln::Error (the one outcome allowed for bad input) is swallowed, anything else
// propagates and libFuzzer reports it.
template <typename Body>
void expect_kiln_errors_only(Body&& body) {
  try {
    body();
  } catch (const kiln::Error&) {
  }
}

}  // namespace kiln::fuzz
