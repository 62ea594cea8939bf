// Tensor shape helpers shared by the weight readers and the loader.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace kiln {

// Product of the dimensions (1 for a scalar). Readers check their shapes against overflow when
// parsing, so this does not.
inline int64_t element_count(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

// "[2, 3]", for messages.
inline std::string shape_text(std::span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace kiln
