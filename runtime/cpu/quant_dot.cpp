#include "runtime/cpu/quant_dot.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/cpu/amx_tiles.hpp"
#include "runtime/cpu/quant_amx.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace kiln::cpu {

// quant_dot_<isa>.cpp, each compiled for its instruction set.
DotKernel dot_kernel_avx512_vnni_impl();
DotKernel dot_kernel_avx2_impl();
DotKernel dot_kernel_portable_impl();
DotKernel dot_kernel_amx_int8_impl();  // quant_amx.cpp

namespace {

// F16C (the fp16 scale conversions) through CPUID leaf 1, ECX bit 29: clang before 15 has no
// "f16c" in __builtin_cpu_supports.
bool has_f16c() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
#else
  return false;
#endif
}

bool has_avx512_vnni() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         has_f16c();
#else
  return false;
#endif
}

bool has_avx2() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
#else
  return false;
#endif
}

// Round to nearest, ties to even (std::nearbyint's default mode) for |v| < 2^22: adding 1.5 · 2^23
// and taking it back leaves v rounded, in two additions that vectorize, where std::nearbyint is a
// libm call per value on baseline x86-64 (7.5% of a SmolLM2 Q4_K_M prefill on 2 cores, perf).
inline float round_even(float v) {
  constexpr float kShift = 12582912.0f;
  return (v + kShift) - kShift;
}

}  // namespace

// Compiled for AVX2 and the baseline (GCC's target_clones, as attention.cpp), vectorized at -O3.
#if defined(__x86_64__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
void quantize_activations(const float* x, int64_t k, Q8Block* out) {
  for (int64_t b = 0; b < k / kQuantBlockValues; ++b) {
    const float* v = x + b * kQuantBlockValues;
    Q8Block& o = out[b];
    float amax = 0.0f;
    for (int j = 0; j < kQuantBlockValues; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f, inv = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t half[2] = {0, 0};  // the first 16 values' Σ, the last 16's
    for (int h = 0; h < 2; ++h) {
      for (int j = 16 * h; j < 16 * h + 16; ++j) {
        const float scaled = v[j] * inv;  // |scaled| ≤ 127
        const float q = round_even(scaled);
        o.q[j] = static_cast<int8_t>(q);
        o.lo[j] = static_cast<int8_t>(round_even(128.0f * (scaled - q)));  // |scaled - q| ≤ 1/2: within ±64
        half[h] += 128 * o.q[j] + o.lo[j];
      }
    }
    o.step = d / 128.0f;
    o.total = half[0] + half[1];
    o.sum = o.step * static_cast<float>(o.total);
    o.total_first = half[0];
  }
}

DotKernel dot_kernel_avx512_vnni() { return has_avx512_vnni() ? dot_kernel_avx512_vnni_impl() : nullptr; }
DotKernel dot_kernel_avx2() { return has_avx2() ? dot_kernel_avx2_impl() : nullptr; }
DotKernel dot_kernel_portable() { return dot_kernel_portable_impl(); }

// Here, in a file compiled for any x86-64, not in quant_amx.cpp's AVX-512 code: every prefill asks.
bool amx_int8_available() {
  static const bool available = ((cpuid7_edx() >> 25) & 1) != 0 && has_avx512_vnni() && amx_tiles_granted();
  return available;
}
DotKernel dot_kernel_amx_int8() { return amx_int8_available() ? dot_kernel_amx_int8_impl() : nullptr; }

DotKernel dot_kernel() {
  static const DotKernel kernel = has_avx512_vnni() ? dot_kernel_avx512_vnni_impl()
                                  : has_avx2()      ? dot_kernel_avx2_impl()
                                                    : dot_kernel_portable_impl();
  return kernel;
}

const char* dot_isa() {
  return has_avx512_vnni() ? "AVX-512 VNNI" : has_avx2() ? "AVX2" : "portable";
}

}  // namespace kiln::cpu
