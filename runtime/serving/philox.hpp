// Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC11): a counter-based
// generator, so the random bits for (key, counter) need no state and come out the same on the host
// and on the device. The sampler keys it with the request's seed and counts with the token index.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

namespace kiln {

struct PhiloxBlock {
  uint32_t v[4];
};

namespace philox_detail {

constexpr uint32_t kMultiplier0 = 0xD2511F53u;
constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

KILN_HOST_DEVICE inline void round(PhiloxBlock& c, uint32_t k0, uint32_t k1) {
  const uint64_t p0 = static_cast<uint64_t>(kMultiplier0) * c.v[0];
  const uint64_t p1 = static_cast<uint64_t>(kMultiplier1) * c.v[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  c = PhiloxBlock{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
}

}  // namespace philox_detail

// Ten rounds, the key bumped by the Weyl constants between rounds (Random123's philox4x32_10).
KILN_HOST_DEVICE inline PhiloxBlock philox4x32_10(PhiloxBlock counter, uint32_t key0, uint32_t key1) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key0 += philox_detail::kWeyl0;
      key1 += philox_detail::kWeyl1;
    }
    philox_detail::round(counter, key0, key1);
  }
  return counter;
}

// 64 uniform bits for the counter-th draw of a stream keyed by seed.
KILN_HOST_DEVICE inline uint64_t philox_random64(uint64_t seed, uint64_t counter) {
  const PhiloxBlock out = philox4x32_10(
      PhiloxBlock{{static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u}},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return (static_cast<uint64_t>(out.v[1]) << 32) | out.v[0];
}

}  // namespace kiln
