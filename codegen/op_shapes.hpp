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

// The whole-step decode kernel of a dense decoder (templates/decode_step.cuh): not an op of the
// graph but the decode graph's ops in one launch, so it takes their shape constants and computes
// with exactly their sizes.
struct decode_step {
  embed embed_tokens;
  rmsnorm input_norm;
  linear qkv_proj;
  attention_prep prep;
  attention attn;
  linear o_proj;
  rmsnorm post_norm;
  linear gate_up_proj;
  silu_mul act;
  linear down_proj;
  rmsnorm_rows norm;
  linear lm_head;
  int layers;
  int max_batch;  // sequences per step (build.megakernel_max_batch); larger steps run the per-op path
};

}  // namespace shape

}  // namespace kiln
