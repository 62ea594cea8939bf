// The fusion pass: fewer kernel launches per layer, which is what small models are bound by
// (SmolLM2-135M's decode step is ~330 launches of ~2 µs in a CUDA graph against a 64 µs
// bandwidth floor). Chosen at codegen, per model; the CPU reference always runs every op.
//
//   attention_prep   [head_rmsnorm] + rope + kv_write on the fused qkv rows: one kernel, both
//                    phases (dense families); saves 0.5-1.7 µs per layer at decode on an H200.
//
// Folding RMSNorm or silu(gate)·up into the next projection's input load was built and measured
// too, and lost: every GEMV block recomputes the folded input, which costs more than the launch
// it saves (bench/RESULTS.md, 2026-11-21).
#include "codegen/graph_build.hpp"

namespace kiln::codegen {

namespace {

// [head_rmsnorm] + rope + kv_write over `qkv` -> attention_prep.
void fuse_attention_prep(std::vector<Op>& ops) {
  for (size_t i = 0; i < ops.size(); ++i) {
    size_t rope = i;
    if (ops[i].kind == OpKind::head_rmsnorm) rope = i + 1;
    if (rope + 1 >= ops.size() || ops[rope].kind != OpKind::rope || ops[rope + 1].kind != OpKind::kv_write) continue;
    if (ops[rope].interleaved || ops[rope].reads != std::vector<std::string>{"qkv"}) continue;
    Op prep{OpKind::attention_prep};
    prep.parts.assign(ops.begin() + i, ops.begin() + rope + 2);
    prep.label = "self_attn (q/k prep)";
    for (const Op& part : prep.parts) prep.math += (prep.math.empty() ? "" : "; then ") + part.math;
    prep.reads = {"qkv"};
    prep.writes = {"qkv"};
    const Op& kv = ops[rope + 1];
    prep.dims = {{"heads", "kNumHeads"}, {"kv_heads", kv.dims.at("kv_heads")}, {"head_dim", kv.dims.at("head_dim")},
                 {"row", kv.dims.at("row")}, {"page_size", kv.dims.at("page_size")}};
    prep.reals = {{"eps", "kRmsNormEps"}};
    if (ops[i].kind == OpKind::head_rmsnorm) prep.weights = ops[i].weights;  // q_norm, k_norm
    prep.kernel = "attention_prep";
    ops.erase(ops.begin() + i, ops.begin() + rope + 2);
    ops.insert(ops.begin() + i, prep);
  }
}

}  // namespace

void fuse(Graph& g) {
  if (g.latent_kv) return;  // MLA writes its latent cache with its own ops
  for (LayerBlock& block : g.blocks) {
    for (auto& [stage, ops] : block.stages) fuse_attention_prep(ops);
  }
}

}  // namespace kiln::codegen
