// The dot-product kernels for AVX-512 VNNI (512-bit vpdpbusd, 32 registers); compiled with -mavx512vnni -mavx512vl -mavx512bw -mavx2 -mfma -mf16c (CMakeLists.txt).
#if defined(__x86_64__)
#define KILN_DOT_SIMD 2
#else  // never chosen there (quant_dot.cpp): built as the portable kernel
#define KILN_DOT_SIMD 0
#endif
#define KILN_DOT_NS avx512_vnni
#include "runtime/cpu/quant_dot_impl.hpp"

namespace kiln::cpu {

DotKernel dot_kernel_avx512_vnni_impl() { return &avx512_vnni::run; }

}  // namespace kiln::cpu
