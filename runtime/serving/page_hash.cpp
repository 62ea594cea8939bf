#include "runtime/serving/page_hash.hpp"

namespace kiln {
namespace {

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t default_page_hash(uint64_t parent_key, std::span<const int32_t> page_tokens) {
  uint64_t h = mix64(parent_key + 0x9E3779B97F4A7C15ull * (page_tokens.size() + 1));
  for (int32_t token : page_tokens) {
    h = mix64(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 0x9E3779B97F4A7C15ull));
  }
  return h;
}

}  // namespace kiln
