#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>

#include "runtime/core/dtype.hpp"

using namespace kiln;

TEST_CASE("bf16 round trip rounds to nearest even and keeps NaN") {
  CHECK(bf16_to_f32(f32_to_bf16(1.0f)) == 1.0f);
  CHECK(bf16_to_f32(f32_to_bf16(-2.5f)) == -2.5f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even gives 1.0.
  CHECK(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)) == 1.0f);
  CHECK(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST_CASE("f16 conversions cover normals, subnormals, inf and NaN") {
  CHECK(f16_to_f32(0x3c00) == 1.0f);
  CHECK(f16_to_f32(0xc000) == -2.0f);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(std::isinf(f16_to_f32(0x7c00)));
  CHECK(std::isnan(f16_to_f32(0x7e00)));
  for (uint32_t h = 0; h < 0x7c00; h += 7) {
    CHECK(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))) == h);
  }
  CHECK(f32_to_f16(1e6f) == 0x7c00);
}
