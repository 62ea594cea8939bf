// Catch2 checks of the GPU tests: a kernel's output against its CPU reference (NMSE, no NaN: the
// outputs are poisoned with NaN before each run, so an element a kernel fails to write shows), a
// clean launch, and the elements an in-place op must leave alone.
#pragma once

#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/support/gpu_harness.hpp"

namespace kiln::kernel_test {

// The anchors' limits (DESIGN.md): NMSE per op against the fp32 reference.
constexpr double kBf16Limit = 5e-4;  // bf16 activations and weights
constexpr double kExact = 0.0;       // copies and lookups

inline void check_close(const std::string& what, const std::vector<float>& ref, const std::vector<float>& got,
                        double limit) {
  const Comparison c = compare(ref, got);
  INFO(what << ": NMSE " << c.nmse << " (limit " << limit << "), max |diff| " << c.max_abs << ", " << c.nans
            << " NaN");
  CHECK(c.nans == 0);
  CHECK(c.nmse <= limit);
}

// Waits for the device: the launches so far raised no error. A launch with nothing to do must
// launch nothing (a zero-sized grid is an error).
inline void check_launch(const std::string& what) {
  const cudaError_t sync = cudaDeviceSynchronize();
  const cudaError_t last = cudaGetLastError();
  INFO(what << ": " << cudaGetErrorString(sync != cudaSuccess ? sync : last));
  REQUIRE(sync == cudaSuccess);
  REQUIRE(last == cudaSuccess);
}

// Elements of a row that an in-place op must leave bit-identical keep their bf16 bits.
inline void check_untouched(const std::string& what, const std::vector<uint16_t>& before,
                            const std::vector<uint16_t>& after, const std::vector<bool>& changes) {
  long long moved = 0;
  for (size_t i = 0; i < before.size(); ++i) moved += !changes[i] && before[i] != after[i];
  INFO(what << ": " << moved << " elements outside the op's range changed");
  CHECK(moved == 0);
}

// Two runs that must agree bit for bit (bf16 outputs): `against` names what `got` is compared with.
inline void check_same_bits(const std::string& what, const std::string& against, const std::vector<uint16_t>& expected,
                            const std::vector<uint16_t>& got) {
  REQUIRE(expected.size() == got.size());
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i] != expected[i];
  INFO(what << ": " << differ << " of " << got.size() << " values differ from " << against);
  CHECK(differ == 0);
}

}  // namespace kiln::kernel_test
