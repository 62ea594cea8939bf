// Streaming parsers (tool calls, reasoning) hold back the end of the text that may still grow into
// a tag they look for: this is how much of it.
#pragma once

#include <algorithm>
#include <string_view>

namespace kiln {

// The length of the longest end of `text` that is a proper beginning of `tag` ("<tool" of
// "<tool_call>"; 0 when none).
inline size_t partial_tag(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace kiln
