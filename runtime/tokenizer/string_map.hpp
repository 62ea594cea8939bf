// An unordered_map keyed by std::string that can be searched with a std::string_view, so hot
// lookups (a pre-tokenized piece, a merged symbol) need no temporary string.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace kiln {

struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};

template <typename Value>
using StringMap = std::unordered_map<std::string, Value, StringViewHash, std::equal_to<>>;

}  // namespace kiln
