#include "runtime/serving/page_hash.hpp"

#include "runtime/core/hash.hpp"

namespace kiln {

uint64_t default_page_hash(uint64_t parent_key, std::span<const int32_t> page_tokens) {
  uint64_t h = mix64(parent_key + kGoldenGamma * (page_tokens.size() + 1));
  for (int32_t token : page_tokens) {
    h = mix64(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) + kGoldenGamma));
  }
  return h;
}

}  // namespace kiln
