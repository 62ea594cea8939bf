// splitmix64's finalizer: a cheap, well-mixed 64-bit permutation (Steele, Lea, Flood 2014). Used
// for prefix-cache page keys, request seeds and deterministic random weights; changing it changes
// all three, so the constants are those of the reference splitmix64.
#pragma once

#include <cstdint>

namespace kiln {

inline constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;  // splitmix64's counter increment

inline constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace kiln
