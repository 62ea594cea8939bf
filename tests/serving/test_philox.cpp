#include <catch2/catch.hpp>

#include <set>

#include "runtime/serving/philox.hpp"

using namespace kiln;

// Known-answer vectors of Random123's kat_vectors for philox4x32_10 (counter, key -> output).
TEST_CASE("philox4x32_10 matches the Random123 known answers") {
  const PhiloxBlock zeros = philox4x32_10(PhiloxBlock{{0, 0, 0, 0}}, 0, 0);
  CHECK(zeros.v[0] == 0x6627e8d5u);
  CHECK(zeros.v[1] == 0xe169c58du);
  CHECK(zeros.v[2] == 0xbc57ac4cu);
  CHECK(zeros.v[3] == 0x9b00dbd8u);

  const PhiloxBlock ones =
      philox4x32_10(PhiloxBlock{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  CHECK(ones.v[0] == 0x408f276du);
  CHECK(ones.v[1] == 0x41c83b0eu);
  CHECK(ones.v[2] == 0xa20bc7c6u);
  CHECK(ones.v[3] == 0x6d5451fdu);

  const PhiloxBlock pi = philox4x32_10(PhiloxBlock{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
                                       0xa4093822u, 0x299f31d0u);
  CHECK(pi.v[0] == 0xd16cfe09u);
  CHECK(pi.v[1] == 0x94fdccebu);
  CHECK(pi.v[2] == 0x5001e420u);
  CHECK(pi.v[3] == 0x24126ea1u);
}

TEST_CASE("philox_random64 packs the first two words and depends on seed and counter only") {
  const PhiloxBlock b = philox4x32_10(PhiloxBlock{{7, 0, 0, 0}}, 0x89abcdefu, 0x01234567u);
  CHECK(philox_random64(0x0123456789abcdefull, 7) == ((static_cast<uint64_t>(b.v[1]) << 32) | b.v[0]));
  // The counter's high word is the block's second word (the first check leaves it 0).
  const PhiloxBlock high = philox4x32_10(PhiloxBlock{{3, 1, 0, 0}}, 42, 0);
  CHECK(philox_random64(42, (uint64_t{1} << 32) | 3) == ((static_cast<uint64_t>(high.v[1]) << 32) | high.v[0]));
  std::set<uint64_t> distinct;
  for (uint64_t seed = 0; seed < 100; ++seed) {
    for (uint64_t counter = 0; counter < 100; ++counter) distinct.insert(philox_random64(seed, counter));
  }
  CHECK(distinct.size() == 10000);
}
