// The dot-product kernels for any processor (plain C++) (CMakeLists.txt).
#define KILN_DOT_SIMD 0
#define KILN_DOT_NS portable
#include "runtime/cpu/quant_dot_impl.hpp"

namespace kiln::cpu {

DotKernel dot_kernel_portable_impl() { return &portable::run; }

}  // namespace kiln::cpu
