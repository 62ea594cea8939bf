// The shape struct of every op: shape::<op> has the KILN_SHAPE members of its record in
// codegen/ops.def, in order. A generated model.hpp defines one constant per kernel instantiation
// (`constexpr shape::rmsnorm kRmsnorm576{.dim = kHiddenSize, .eps = kRmsNormEps};`), which the
// kernel template takes as its template argument and the reference op as its first argument, so
// sizes travel by name from the config to the kernel.
//
// Included by NVRTC-compiled code (generated model.hpp): no includes, nothing but plain types.
#pragma once

namespace kiln {

// Where a linear op's result goes: bf16 activations, added into the fp32 residual stream, or
// fp32 (logits, router logits).
enum class LinearOut { store_bf16, add_f32, store_f32 };

namespace shape {

#define KILN_OP(name, summary, template_header, ref_header) struct name {
#define KILN_SHAPE(type, member) type member;
#define KILN_END };
#include "codegen/ops.def"

}  // namespace shape

}  // namespace kiln
