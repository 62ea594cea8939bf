// The whole-step decode kernel in the generated code (codegen/decode_step.hpp).
#include "codegen/decode_step.hpp"

#include <algorithm>

#include "codegen/emit_ops.hpp"
#include "codegen/graph_build.hpp"

namespace kiln::codegen {

namespace {

bool is_linear(const Op& op, LinearOut out) {
  return op.kind == OpKind::linear && op.shape.at("out") == linear_out_name(out);
}

std::string weight_or_null(const Op& op, const std::string& arg, const std::string& scope) {
  const auto it = op.args.find(arg);
  return it == op.args.end() ? "nullptr" : scope + it->second;
}

}  // namespace

std::optional<DecodeStepOps> decode_step_ops(const ModelSpec& spec, const Graph& g) {
  if (spec.build.megakernel_max_batch <= 0 || spec.ranks > 1 || g.latent_kv) return std::nullopt;
  if (g.prologue.size() != 1 || g.blocks.size() != 1 || g.epilogue.size() != 2) return std::nullopt;
  const LayerBlock& block = g.blocks.front();
  if (block.first != 0 || block.last != spec.num_hidden_layers || block.stages.size() != 2) return std::nullopt;
  const std::vector<Op>& attn = block.stages[0].second;
  const std::vector<Op>& mlp = block.stages[1].second;
  // attention_prep and attention fused (codegen/fuse.cpp): the stage's third op holds both; gate_up
  // and silu_mul fused: the MLP's second op holds both.
  if (attn.size() != 4 || mlp.size() != 3 || attn[2].kind != OpKind::prep_attention || attn[2].parts.size() != 2 ||
      mlp[1].kind != OpKind::linear_act || mlp[1].parts.size() != 2) {
    return std::nullopt;
  }
  for (const Op* op : g.all_ops()) {
    if (!op->rank_case.empty()) return std::nullopt;
  }
  const DecodeStepOps ops{&g.prologue[0], &attn[0], &attn[1],          &attn[2].parts[0], &attn[2].parts[1], &attn[3],
                          &mlp[0],        &mlp[1].parts[0], &mlp[1].parts[1], &mlp[2], &g.epilogue[0], &g.epilogue[1]};
  const bool dense = ops.embed->kind == OpKind::embed && ops.input_norm->kind == OpKind::rmsnorm &&
                     is_linear(*ops.qkv_proj, LinearOut::store_bf16) && ops.prep->kind == OpKind::attention_prep &&
                     ops.attention->kind == OpKind::attention && is_linear(*ops.o_proj, LinearOut::add_f32) &&
                     ops.post_norm->kind == OpKind::rmsnorm && is_linear(*ops.gate_up_proj, LinearOut::store_bf16) &&
                     ops.act->kind == OpKind::silu_mul && is_linear(*ops.down_proj, LinearOut::add_f32) &&
                     ops.norm->kind == OpKind::rmsnorm_rows && is_linear(*ops.lm_head, LinearOut::store_f32);
  if (!dense) return std::nullopt;
  return ops;
}

void define_decode_step_constants(const ModelSpec& spec, Graph& g) {
  g.define("kMegakernelMaxBatch", std::min(spec.build.megakernel_max_batch, spec.build.max_batch),
           "build.megakernel_max_batch (at most build.max_batch): decode steps of this many sequences or fewer run "
           "the whole-step kernel");
  // templates/blocks/step_sync.cuh: epoch and blocks finished, then embed, 6 stages per layer, lm_head.
  g.define("kStepSyncWords", 2 + 1 + 6 * spec.num_hidden_layers + 1,
           "whole-step decode counters: epoch, blocks finished, one per stage (embed, 6 per layer, lm_head)");
}

void emit_decode_step_shape(const DecodeStepOps& ops, Code& c) {
  c.comment("The whole-step decode kernel (templates/decode_step.cuh): the decode ops above as stages of one");
  c.comment("launch, for steps of up to kMegakernelMaxBatch sequences (larger ones run op by op).");
  c.line("struct DecodeStep {");
  c.line("  static constexpr shape::decode_step value{");
  const std::vector<std::pair<std::string, const Op*>> members = {
      {"embed_tokens", ops.embed}, {"input_norm", ops.input_norm}, {"qkv_proj", ops.qkv_proj},
      {"prep", ops.prep},          {"attn", ops.attention},        {"o_proj", ops.o_proj},
      {"post_norm", ops.post_norm}, {"gate_up_proj", ops.gate_up_proj}, {"act", ops.act},
      {"down_proj", ops.down_proj}, {"norm", ops.norm},          {"lm_head", ops.lm_head}};
  for (const auto& [member, op] : members) c.line("      ." + member + " = " + shape_constant(*op) + ",");
  c.line("      .layers = kNumLayers,");
  c.line("      .max_batch = kMegakernelMaxBatch};");
  c.line("};");
}

std::string decode_step_signature() {
  return "cudaError_t decode_step(const DecodeStepWeights<kNumLayers>& w, const DecodeStepArgs& args, cudaStream_t stream)";
}

void emit_decode_step_wrapper(Code& c) {
  c.comment("The whole decode step in one launch (DecodeStep in model.hpp).");
  c.line(decode_step_signature() + " {");
  c.line("  return kiln::decode_step<DecodeStep>(w, args, stream);");
  c.line("}");
  c.line();
  c.line("static_assert(kiln::decode_step_sync_words<DecodeStep>() == kStepSyncWords);");
}

namespace {

// A projection as the whole-step kernel reads it: bf16 rows (the backend runs the kernel only
// when every matrix is bf16; a GGUF file's quantized blocks decode op by op).
std::string rows(const std::string& scope, const std::string& field) {
  return "static_cast<const bf16*>(" + scope + field + ".data)";
}

}  // namespace

void emit_decode_step_forward(const DecodeStepOps& ops, Code& c) {
  const std::string lw = "lw.";
  c.comment("The weights as the whole-step kernel takes them (bound once).");
  c.line("DecodeStepWeights<kNumLayers> bind_decode_step(const Weights<bf16>& w) {");
  c.line("  DecodeStepWeights<kNumLayers> s{};");
  c.line("  s.embed_tokens = " + rows("w.", ops.embed->args.at("table")) + ";");
  c.line("  s.norm = w." + ops.norm->args.at("weight") + ";");
  c.line("  s.lm_head = " + rows("w.", ops.lm_head->args.at("weight")) + ";");
  c.line("  for (int layer = 0; layer < kNumLayers; ++layer) {");
  c.line("    const LayerWeights<bf16>& lw = w.layers[layer];");
  c.line("    s.layers[layer] = DecodeStepLayer{.input_norm = lw." + ops.input_norm->args.at("weight") + ",");
  c.line("                                      .qkv_proj = " + rows("lw.", ops.qkv_proj->args.at("weight")) + ",");
  c.line("                                      .q_norm = " + weight_or_null(*ops.prep, "q_norm", lw) + ",");
  c.line("                                      .k_norm = " + weight_or_null(*ops.prep, "k_norm", lw) + ",");
  c.line("                                      .o_proj = " + rows("lw.", ops.o_proj->args.at("weight")) + ",");
  c.line("                                      .post_norm = lw." + ops.post_norm->args.at("weight") + ",");
  c.line("                                      .gate_up_proj = " + rows("lw.", ops.gate_up_proj->args.at("weight")) + ",");
  c.line("                                      .down_proj = " + rows("lw.", ops.down_proj->args.at("weight")) + "};");
  c.line("  }");
  c.line("  return s;");
  c.line("}");
  c.line();
  c.comment("Decode of up to kMegakernelMaxBatch sequences in one launch (templates/decode_step.cuh): the ops of");
  c.comment("forward_decode as stages of one kernel, each waiting only for the stage it reads: embed; per layer");
  c.comment("qkv_proj (input_layernorm folded in), attention (RoPE and the KV write folded in), the split-KV merge,");
  c.comment("o_proj, gate_up_proj (post_attention_layernorm and silu(gate) ⊙ up folded in), down_proj; the final");
  c.comment("norm and lm_head. Same float operations in the same order as forward_decode: the same bits.");
  c.line("void forward_decode_step(const DecodeStepWeights<kNumLayers>& w, const CudaStep& step, const CudaContext& ctx,");
  c.line("                         float* logits) {");
  c.indent();
  c.line("const DecodeStepArgs args = decode_step_args(");
  c.line("    step, ctx, logits, reinterpret_cast<float*>(ctx.arena + GpuArena::" + ops.embed->args.at("x") + "),");
  c.line("    reinterpret_cast<bf16*>(ctx.arena + GpuArena::" + ops.qkv_proj->args.at("out") + "),");
  c.line("    reinterpret_cast<bf16*>(ctx.arena + GpuArena::" + ops.o_proj->args.at("in") + "),");
  c.line("    reinterpret_cast<bf16*>(ctx.arena + GpuArena::" + ops.down_proj->args.at("in") + "));");
  c.line("KILN_CUDA(decode_step(w, args, ctx.stream));");
  c.dedent();
  c.line("}");
}

}  // namespace kiln::codegen
