// Sets of Unicode code points as sorted, disjoint, inclusive ranges: what a grammar's character
// class and a regex's class are, before they become UTF-8 byte sequences.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace kiln::code_ranges {

using Range = std::pair<uint32_t, uint32_t>;  // [first, second]
inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;
inline const std::vector<Range> kSurrogates = {{0xD800, 0xDFFF}};  // no UTF-8 encoding

// Sorted, overlapping and touching ranges merged.
inline std::vector<Range> normalized(std::vector<Range> r) {
  std::sort(r.begin(), r.end());
  std::vector<Range> out;
  for (const Range& x : r) {
    if (!out.empty() && x.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, x.second);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

// Every code point not in r.
inline std::vector<Range> complement(const std::vector<Range>& r) {
  std::vector<Range> out;
  uint32_t next = 0;
  for (const Range& x : normalized(r)) {
    if (x.first > next) out.emplace_back(next, x.first - 1);
    next = x.second + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

// a without b: a ∩ ¬b = ¬(¬a ∪ b).
inline std::vector<Range> minus(const std::vector<Range>& a, const std::vector<Range>& b) {
  std::vector<Range> both = complement(a);
  both.insert(both.end(), b.begin(), b.end());
  return complement(both);
}

}  // namespace kiln::code_ranges
