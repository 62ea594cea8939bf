// The FP8 inputs of the prefill's FP8 GEMM (templates/fp8_rows.hpp) as every kernel that writes
// them must, bit for bit (quantize_rows_fp8, and rmsnorm and silu_mul where fused), computed on the
// CPU with runtime/core/dtype.hpp's E4M3 rounding.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/dtype.hpp"
#include "templates/fp8_rows.hpp"
#include "tests/kernels/kernel_test.hpp"

namespace kiln::kernel_test {

struct Fp8Inputs {
  int padded = 0;
  std::vector<uint8_t> codes;  // [padded][k]
  std::vector<float> scales;   // [k / 128][padded]
};

// From x, rows × k values (bf16 values, as floats): per 128 columns, or (row_scale) one scale a row
// in each of its 128-column slots.
inline Fp8Inputs expected_fp8_inputs(const std::vector<float>& x, int rows, int k, bool row_scale = false) {
  Fp8Inputs want;
  want.padded = fp8_gemm_rows(rows);
  want.codes.assign(static_cast<size_t>(want.padded) * k, 0);  // padding rows: zero codes, scale 1
  want.scales.assign(static_cast<size_t>(want.padded) * k / kFp8InputBlock, 1.0f);
  for (int t = 0; t < rows; ++t) {
    const float* row = x.data() + static_cast<size_t>(t) * k;
    float row_amax = 0.0f;
    for (int i = 0; i < k; ++i) row_amax = std::max(row_amax, std::fabs(row[i]));
    for (int b = 0; b < k / kFp8InputBlock; ++b) {
      const float* v = row + b * kFp8InputBlock;
      float amax = 0.0f;
      for (int i = 0; i < kFp8InputBlock; ++i) amax = std::max(amax, std::fabs(v[i]));
      if (row_scale) amax = row_amax;
      const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
      want.scales[static_cast<size_t>(b) * want.padded + t] = scale;
      const float inverse = 1.0f / scale;
      for (int i = 0; i < kFp8InputBlock; ++i) {
        want.codes[static_cast<size_t>(t) * k + b * kFp8InputBlock + i] = f32_to_f8e4m3(v[i] * inverse);
      }
    }
  }
  return want;
}

// Device buffers for them, poisoned, as a step's FP8 input buffers (padded rows included).
struct Fp8InputBuffers {
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<float> scales;
  Fp8InputBuffers(int rows, int k)
      : codes(static_cast<size_t>(fp8_gemm_rows(rows)) * k), scales(static_cast<size_t>(fp8_gemm_rows(rows)) * k / kFp8InputBlock) {
    codes.poison();
    scales.poison();
  }
  Fp8Rows rows(bool row_scale = false) { return {codes.get(), scales.get(), row_scale}; }
};

inline void check_fp8_inputs(const std::string& what, Fp8InputBuffers& got, const Fp8Inputs& want) {
  INFO(what << ": the FP8 inputs' codes and scales, bit for bit");
  CHECK(got.codes.download() == want.codes);
  CHECK(got.scales.download() == want.scales);
}

// An op's FP8 output against its plain one: `plain()` writes its bf16 rows into `out`, `fused(rows)`
// the same rows as FP8 inputs in their place, scaled per 128 columns and then per row. Those must be
// the bf16 rows' codes and scales, bit for bit (padding rows included), and `out` not written
// (unless the op writes its rows there first and quantizes them after: `stages_blocks` /
// `stages_rows` for each scaling).
template <typename Plain, typename Fused>
void check_fp8_output(const std::string& what, int rows, int k, DeviceBuffer<uint16_t>& out, Plain&& plain,
                      Fused&& fused, bool stages_blocks = false, bool stages_rows = false) {
  plain();
  check_launch(what + " (bf16 rows)");
  const std::vector<float> values = bf16_to_f32(out.download());
  for (const bool row_scale : {false, true}) {
    const std::string which = what + (row_scale ? ", a scale a row" : ", a scale per 128 columns");
    const Fp8Inputs want = expected_fp8_inputs(values, rows, k, row_scale);
    out.poison();
    const std::vector<uint16_t> poisoned = out.download();
    Fp8InputBuffers got(rows, k);
    fused(got.rows(row_scale));
    check_launch(which);
    check_fp8_inputs(which, got, want);
    if (row_scale ? stages_rows : stages_blocks) continue;
    INFO(which << ": the bf16 rows not written");
    CHECK(out.download() == poisoned);
  }
}

}  // namespace kiln::kernel_test
