// A compiled PCRE2 pattern (UTF + UCP, JIT when available) for pre-tokenizer splits.
//
// Tokenizer patterns are written for Oniguruma (HF tokenizers) and use \p{L}, \p{N}, lookahead
// and (?i:...) groups; PCRE2 with PCRE2_UCP gives them the same meaning (checked against HF
// tokenizers on thousands of random strings, see tests/tokenizer/gen/crosscheck_hf.py). Unicode
// properties follow the system PCRE2's Unicode version (14.0 for Debian 12's 10.42).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln {

class Regex {
 public:
  // Throws kiln::Error naming `origin` and the offset when the pattern does not compile.
  Regex(const std::string& pattern, const std::string& origin);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Every non-overlapping match in `subject` (valid UTF-8), left to right, as [begin, end) byte
  // offsets. An empty match is skipped by one character, as Oniguruma's find_iter does.
  void find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>& matches) const;

 private:
  struct Impl;
  std::string pattern_;  // for error messages
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
