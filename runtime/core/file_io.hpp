// Whole-file reads for the small text files kiln loads (JSON configs, tokenizer files, test
// vectors), and the checks every file kiln opens goes through. Weight files are mapped instead
// (mapped_file.hpp).
#pragma once

#include <cstdint>
#include <string>

namespace kiln {

// The largest text file read_file accepts. Tokenizer files, the largest text kiln reads, stay
// under 50 MB; anything near this is a wrong path, and must not be read into memory whole.
inline constexpr uint64_t kMaxTextFileBytes = uint64_t{512} << 20;

// The bytes of the regular file at `path`; throws kiln::Error naming the path when it is not a
// regular file (a FIFO would block, a directory reads as empty), is larger than `max_bytes`, or
// cannot be opened or read.
std::string read_file(const std::string& path, uint64_t max_bytes = kMaxTextFileBytes);

// Opens `path` read-only, refusing anything but a regular file before it can block (a FIFO's
// open() waits for a writer): the open does not block and the type is checked on the descriptor.
// Returns the descriptor (the caller closes it) and the file's size.
int open_regular_file(const std::string& path, uint64_t* size);

}  // namespace kiln
