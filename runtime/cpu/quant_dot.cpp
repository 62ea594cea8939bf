#include "runtime/cpu/quant_dot.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace kiln::cpu {

// quant_dot_<isa>.cpp, each compiled for its instruction set.
DotKernel dot_kernel_avx512_vnni_impl();
DotKernel dot_kernel_avx2_impl();
DotKernel dot_kernel_portable_impl();

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

}  // namespace

void quantize_activations(const float* x, int64_t k, Q8Pair* out) {
  for (int64_t p = 0; p < activation_pairs(k); ++p) {
    Q8Pair& o = out[p];
    std::fill(std::begin(o.sum), std::end(o.sum), 0.0f);
    std::fill(std::begin(o.offset), std::end(o.offset), 0);
    for (int64_t half = 0; half < 2; ++half) {
      const int64_t b = 2 * p + half;  // block of the row
      const bool present = (b + 1) * kQuantBlockValues <= k;
      const float* v = x + b * kQuantBlockValues;
      float amax = 0.0f;
      for (int j = 0; present && j < kQuantBlockValues; ++j) amax = std::max(amax, std::fabs(v[j]));
      const float d = amax / 127.0f, inv = d != 0.0f ? 1.0f / d : 0.0f;
      int32_t sum = 0;  // of 128·q + lo
      for (int j = 0; j < kQuantBlockValues; ++j) {
        const int64_t pos = 8 * (j / 4) + 4 * half + j % 4;  // the dot order (weight_matrix.hpp)
        const float scaled = present ? v[j] * inv : 0.0f;
        const float q = std::nearbyint(scaled);
        o.q[pos] = static_cast<int8_t>(q);
        o.lo[pos] = static_cast<int8_t>(std::nearbyint(128.0f * (scaled - q)));  // |scaled - q| ≤ 1/2: within ±64
        sum += 128 * o.q[pos] + o.lo[pos];
      }
      const float step = d / 128.0f;
      for (int lane = static_cast<int>(half); lane < 16; lane += 2) o.step[lane] = step;
      o.sum[half] = step * static_cast<float>(sum);
      o.offset[half] = -8 * sum;
    }
  }
}

DotKernel dot_kernel_avx512_vnni() { return has_avx512_vnni() ? dot_kernel_avx512_vnni_impl() : nullptr; }
DotKernel dot_kernel_avx2() { return has_avx2() ? dot_kernel_avx2_impl() : nullptr; }
DotKernel dot_kernel_portable() { return dot_kernel_portable_impl(); }

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
