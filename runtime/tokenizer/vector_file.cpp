#include "runtime/tokenizer/vector_file.hpp"

#include <charconv>
#include <sstream>

#include "runtime/core/error.hpp"
#include "runtime/core/file_io.hpp"

namespace kiln {

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& origin) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < text.size()) {
    const char c = text[pos];
    if (c == ' ' || c == ',' || c == '\t' || c == '\r' || c == '\n') {
      ++pos;
      continue;
    }
    int64_t value = 0;
    const auto [end, error] = std::from_chars(text.data() + pos, text.data() + text.size(), value);
    if (error != std::errc() || value < INT32_MIN || value > INT32_MAX ||
        (end != text.data() + text.size() && std::string_view(" ,\t\r\n").find(*end) == std::string_view::npos)) {
      fail(origin, ": \"", text, "\" is not a list of token ids (bad value at offset ", pos, ")");
    }
    ids.push_back(static_cast<int32_t>(value));
    pos = end - text.data();
  }
  return ids;
}

std::vector<TokenizerVector> read_tokenizer_vectors(const std::string& gguf_path) {
  const std::string inp_path = gguf_path + ".inp", out_path = gguf_path + ".out";
  const std::string inp = read_file(inp_path);
  const std::string out = read_file(out_path);

  constexpr std::string_view kSeparator = "\n__ggml_vocab_test__\n";
  std::vector<TokenizerVector> cases;
  size_t pos = 0;
  while (pos < inp.size()) {
    const size_t hit = inp.find(kSeparator, pos);
    if (hit == std::string::npos) {
      fail(inp_path, ": text after the last \"__ggml_vocab_test__\" line (every case must end with one)");
    }
    cases.push_back({inp.substr(pos, hit - pos), {}});
    pos = hit + kSeparator.size();
  }

  std::vector<std::string> lines;
  std::istringstream stream(out);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  if (lines.size() != cases.size()) {
    fail(out_path, ": ", lines.size(), " lines of ids for ", cases.size(), " test strings in ", inp_path);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    cases[i].ids = parse_id_list(lines[i], out_path + " line " + std::to_string(i + 1));
  }
  return cases;
}

}  // namespace kiln
