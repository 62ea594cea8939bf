// llama.cpp's tokenizer test-vector files: NAME.gguf.inp holds test strings, each followed by a
// line "__ggml_vocab_test__"; NAME.gguf.out holds one line per string with the expected token ids
// separated by spaces (no BOS).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct TokenizerVector {
  std::string text;
  std::vector<int32_t> ids;
};

// Reads `gguf_path`.inp and `gguf_path`.out; throws kiln::Error naming the file and line when
// they are missing, malformed or disagree in length.
std::vector<TokenizerVector> read_tokenizer_vectors(const std::string& gguf_path);

// "1 2 3" or "1,2,3" -> ids; throws naming `origin` for anything that is not an integer.
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& origin);

}  // namespace kiln
