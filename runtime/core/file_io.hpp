// Whole-file reads for the small text files kiln loads (JSON configs, tokenizer files, prompts,
// test vectors). Weight files are mapped instead (mapped_file.hpp).
#pragma once

#include <string>

namespace kiln {

// The bytes of the file at `path`; throws kiln::Error naming the path when it is a directory or
// cannot be opened or read.
std::string read_file(const std::string& path);

}  // namespace kiln
