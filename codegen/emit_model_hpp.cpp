// model.hpp: the model's constants (each with the config field it comes from), its weights as a
// struct with shape comments, the activation arena plan, and the declarations the other generated
// files share. The first part includes only the op shape structs, so NVRTC can compile kernels.cu,
// which includes it.
#include <map>
#include <set>

#include "codegen/decode_step.hpp"
#include "codegen/emit.hpp"
#include "codegen/emit_ops.hpp"
#include "codegen/graph_build.hpp"

namespace kiln::codegen {

namespace {

void emit_constants(const Graph& g, Code& c) {
  for (const Constant& k : g.constants) {
    std::string decl;
    if (!k.is_real) {
      const bool wide = k.int_value > 2147483647LL || k.int_value < -2147483648LL;
      decl = std::string(wide ? "constexpr long long " : "constexpr int ") + k.name + " = " + num(k.int_value) + ";";
    } else if (k.type == "float") {
      decl = "constexpr float " + k.name + " = " + real_literal(k.real_value) + ";";
    } else {
      decl = "constexpr double " + k.name + " = " + fmt_real(k.real_value) + ";";
    }
    c.line(pad(decl, 44) + "// " + k.origin);
  }
}

// One constant per kernel instantiation: the op's shape, its members named (codegen/ops.def). Fused
// ops' parts have theirs too (the CPU reference runs the parts).
void emit_op_shapes(const Graph& g, Code& c) {
  std::map<std::string, std::vector<const Op*>> users;
  std::vector<const Op*> order;
  auto visit = [&](const Op& op) {
    auto& list = users[op.kernel];
    if (list.empty()) order.push_back(&op);
    list.push_back(&op);
  };
  for (const Op* op : g.all_ops()) visit_op_and_parts(*op, visit);
  for (const Op* op : order) {
    std::string labels;
    std::set<std::string> seen;
    for (const Op* user : users[op->kernel]) {
      if (seen.insert(user->label).second) labels += (labels.empty() ? "" : ", ") + user->label;
    }
    c.comment(labels);
    c.line("constexpr shape::" + op->record().name + " " + shape_constant(*op) + shape_init(*op) + ";");
  }
}

void emit_weight_fields(const std::vector<const WeightDecl*>& decls, Code& c) {
  for (const WeightDecl* w : decls) {
    std::string note = shape_text(w->shape);
    const std::string type = w->matrix ? "Matrix<T> " : "const T* ";
    c.line(pad(type + w->field + ";", 36) + "// " + pad(note, 14) + w->comment);
  }
}

void emit_weights(const Graph& g, Code& c) {
  std::vector<const WeightDecl*> global, layer;
  for (const auto& w : g.weights) (w.per_layer ? layer : global).push_back(&w);

  c.comment("---- weights: T is bf16 on the GPU and float in the CPU reference; shapes are [rows, cols] ----");
  c.comment("(a Matrix<T> is a projection: on the GPU bf16 rows or a GGUF file's blocks, templates/weight_matrix.hpp)");
  c.line("template <typename T>");
  c.line("struct LayerWeights {");
  c.indent();
  emit_weight_fields(layer, c);
  c.dedent();
  c.line("};");
  c.line();
  c.line("template <typename T>");
  c.line("struct Weights {");
  c.indent();
  std::vector<const WeightDecl*> before, after;
  for (const WeightDecl* w : global) (w->field == "embed_tokens" ? before : after).push_back(w);
  emit_weight_fields(before, c);
  c.line("LayerWeights<T> layers[kNumLayers];");
  emit_weight_fields(after, c);
  c.dedent();
  c.line("};");
}

void emit_arena(const Graph& g, const ArenaPlan& plan, const std::string& name, const std::string& note, bool gpu,
                Code& c) {
  c.comment(note);
  c.line("struct " + name + " {");
  c.indent();
  for (const Buffer& b : g.buffers) {
    const std::string type = b.elem == Elem::i32 ? "int32" : b.elem == Elem::f32 || !gpu ? "fp32" : "bf16";
    c.line(pad("static constexpr long long " + b.name + " = " + num(plan.offset.at(b.name)) + ";", 52) + "// " + type +
           " [T, " + b.per_token + "] " + b.layout);
  }
  c.line(pad("static constexpr long long bytes = " + num(plan.bytes) + ";", 52) + "// for kMaxBatchedTokens tokens");
  c.dedent();
  c.line("};");
}

std::string getter(const WeightDecl& w) { return w.matrix ? "get_matrix<T>" : "get_as<T>"; }

void emit_bind_weights(const Graph& g, Code& c) {
  c.comment("Binds the loaded tensors (by kiln name, see weights.inc) to the fields above.");
  c.line("template <typename T>");
  c.line("Weights<T> bind_weights(const WeightTable& table) {");
  c.indent();
  c.line("Weights<T> w{};");
  // Per-layer weights grouped by their layer range, so each range is one loop.
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::vector<const WeightDecl*>>> ranges;
  for (const auto& wd : g.weights) {
    if (!wd.per_layer) {
      c.line("w." + wd.field + " = table." + getter(wd) + "(\"" + wd.name + "\");");
      continue;
    }
    const auto range = std::make_pair(wd.layer_first, wd.layer_last);
    if (ranges.empty() || ranges.back().first != range) ranges.push_back({range, {}});
    ranges.back().second.push_back(&wd);
  }
  for (const auto& [range, decls] : ranges) {
    const std::string first = g.layer_bound(range.first), last = g.layer_bound(range.second);
    c.line("for (int layer = " + first + "; layer < " + last + "; ++layer) {");
    c.indent();
    for (const WeightDecl* wd : decls) {
      c.line("w.layers[layer]." + wd->field + " = table." + getter(*wd) + "(\"" + wd->name + "\", layer);");
    }
    c.dedent();
    c.line("}");
  }
  c.line("return w;");
  c.dedent();
  c.line("}");
}

}  // namespace

std::string emit_model_hpp(const ModelSpec& spec, const Graph& g) {
  Code c;
  c.line(banner(spec, "Constants, weights and activation arena of this model."));
  c.paragraph(model_summary(spec));
  c.line("#pragma once");
  c.line();
  c.line("#include \"codegen/op_shapes.hpp\"");
  c.line("#include \"templates/fp8_rows.hpp\"");
  c.line("#include \"templates/pending_sums.hpp\"");
  c.line("#include \"templates/weight_matrix.hpp\"");
  c.line();
  c.line("namespace " + spec.ns() + " {");
  c.line();
  c.comment("---- constants: the only literals of the generated code ----");
  emit_constants(g, c);
  c.line();
  c.comment("---- op shapes: each kernel's compile-time arguments, by name (templates and reference ops take them) ----");
  emit_op_shapes(g, c);
  c.line();
  const auto step_ops = decode_step_ops(spec, g);
  if (step_ops) {
    emit_decode_step_shape(*step_ops, c);
    c.line();
  }
  emit_weights(g, c);
  c.line();
  const ArenaPlan gpu = plan_arena(g, spec.build.max_batched_tokens, 2);
  const ArenaPlan ref = plan_arena(g, spec.build.max_batched_tokens, 4);
  emit_arena(g, gpu, "GpuArena", "---- activation arena, GPU: byte offsets planned at codegen (bf16 activations) ----",
             true, c);
  c.line();
  emit_arena(g, ref, "RefArena", "---- activation arena, CPU reference: byte offsets planned at codegen (fp32) ----",
             false, c);
  c.line();
  c.line("}  // namespace " + spec.ns());
  c.line();

  c.line("#ifndef __CUDACC_RTC__");
  c.line("#include <memory>");
  c.line();
  c.line("#include \"runtime/model/model_def.hpp\"");
  c.line();
  c.line("namespace " + spec.ns() + " {");
  c.line();
  c.line(pad("const ModelDef& model_def();", 70) + "// model.cpp");
  c.line(pad("std::unique_ptr<RefForward> make_ref_forward(const WeightTable& weights);", 70) + "// forward_ref.cpp");
  c.line(pad("std::unique_ptr<CudaForward> make_cuda_forward(const WeightTable& weights);", 70) + "// forward.cu");
  c.line();
  emit_bind_weights(g, c);
  c.line();
  c.line("}  // namespace " + spec.ns());
  c.line("#endif  // __CUDACC_RTC__");
  c.line();

  c.line("#ifdef __CUDACC__");
  c.line("#include \"templates/common.cuh\"");
  if (step_ops) c.line("#include \"templates/decode_step_io.cuh\"");
  c.line();
  c.line("namespace " + spec.ns() + " {");
  c.line();
  c.comment("---- kernels.cu: one wrapper per distinct op instantiation ----");
  std::set<std::string> declared;
  for (const Op* op : g.all_ops()) {
    for (const auto& k : cuda_kernels(*op, g)) {
      if (declared.insert(k.name).second) c.line(k.signature + ";");
    }
  }
  if (step_ops) c.line(decode_step_signature() + ";");
  c.line();
  c.line("}  // namespace " + spec.ns());
  c.line("#endif  // __CUDACC__");
  return c.str();
}

}  // namespace kiln::codegen
