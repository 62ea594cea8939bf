// The whole-step decode kernel (templates/decode_step.cuh) in the generated code: which graph ops it
// runs, and what model.hpp, kernels.cu and forward.cu say about it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "codegen/emit.hpp"
#include "codegen/graph.hpp"

namespace kiln::codegen {

// The decode graph's ops, in the roles the kernel gives them.
struct DecodeStepOps {
  const Op* embed;
  const Op* input_norm;
  const Op* qkv_proj;
  const Op* prep;
  const Op* attention;
  const Op* o_proj;
  const Op* post_norm;
  const Op* gate_up_proj;
  const Op* act;
  const Op* down_proj;
  const Op* norm;
  const Op* lm_head;
};

// The ops when the model gets the kernel: a dense decoder layer (Llama, SmolLM2, Qwen3) on one GPU,
// build.megakernel_max_batch > 0. Otherwise (DeepSeek-V2, a tensor-parallel rank's build, the
// option off) none, and decode runs op by op at every batch size.
std::optional<DecodeStepOps> decode_step_ops(const ModelSpec& spec, const Graph& g);
// kMegakernelMaxBatch and kStepSyncWords, for a graph that gets the kernel (build_graph).
void define_decode_step_constants(const ModelSpec& spec, Graph& g);

// model.hpp: the DecodeStep type (its shape) and the wrapper's declaration.
void emit_decode_step_shape(const DecodeStepOps& ops, Code& c);
std::string decode_step_signature();
// kernels.cu: the wrapper and the tie of the counter count to the template's.
void emit_decode_step_wrapper(Code& c);
// forward.cu: binding the weights once, and one step's launch.
void emit_decode_step_forward(const DecodeStepOps& ops, Code& c);

}  // namespace kiln::codegen
