// The dot-product kernels for AVX2 (vpmaddubsw + vpmaddwd); compiled with -mavx2 -mfma -mf16c (CMakeLists.txt).
#if defined(__x86_64__)
#define KILN_DOT_SIMD 1
#else  // never chosen there (quant_dot.cpp): built as the portable kernel
#define KILN_DOT_SIMD 0
#endif
#define KILN_DOT_NS avx2
#include "runtime/cpu/quant_dot_impl.hpp"

namespace kiln::cpu {

DotKernel dot_kernel_avx2_impl() { return &avx2::run; }

}  // namespace kiln::cpu
