// kernels.cu: one wrapper per distinct op instantiation, the model's sizes baked in as template
// arguments. nvcc compiles it into the model's library; the NVRTC test compiles it too (the
// template launchers then only reference their kernels, which instantiates them).
#include <map>
#include <set>

#include "codegen/decode_step.hpp"
#include "codegen/emit.hpp"
#include "codegen/emit_ops.hpp"
#include "codegen/graph_build.hpp"

namespace kiln::codegen {

std::string emit_kernels_cu(const ModelSpec& spec, const Graph& g) {
  // Which ops use each wrapper, for its comment.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const Op*>> users;
  std::map<std::string, CudaKernel> kernels;
  std::set<std::string> headers;
  for (const Op* op : g.all_ops()) {
    for (const auto& h : cuda_headers(*op)) headers.insert(h);
    for (const auto& k : cuda_kernels(*op, g)) {
      if (!kernels.count(k.name)) {
        order.push_back(k.name);
        kernels.emplace(k.name, k);
      }
      users[k.name].push_back(k.op);
    }
  }

  Code c;
  c.line(banner(spec, "CUDA kernels: one instantiation per op of the graph, this model's sizes baked in."));
  const auto step_ops = decode_step_ops(spec, g);
  if (step_ops) headers.insert("templates/decode_step.cuh");
  c.line("#include \"model.hpp\"");
  for (const auto& h : headers) c.line("#include \"" + h + "\"");
  c.line();
  c.line("namespace " + spec.ns() + " {");
  for (const auto& name : order) {
    const CudaKernel& k = kernels.at(name);
    c.line();
    std::string labels;
    std::set<std::string> seen;
    for (const Op* op : users[name]) {
      if (seen.insert(op->label).second) labels += (labels.empty() ? "" : ", ") + op->label;
    }
    c.comment(labels + ": " + users[name].front()->math);
    c.line(k.signature + " {");
    c.line("  " + k.body);
    c.line("}");
  }
  // The sizes the generator computed for the templates' scratch and buffers, against the layouts
  // the templates define (a mismatch stops the build, not the kernel).
  // A fused op whose decode runs its parts (MLA's expanded prefill) has theirs.
  std::set<std::string> ties;
  auto add_ties = [&](const Op& op) {
    for (std::string tie : op.record().ties) {
      const size_t at = tie.find("{shape}");
      if (at != std::string::npos) tie.replace(at, 7, shape_constant(op));
      ties.insert(tie);
    }
  };
  auto decode_runs_parts = [](const Op& op) { return op.record().call(Phase::decode).how == CallHow::parts; };
  for (const Op* op : g.all_ops()) visit_op_and_parts(*op, add_ties, decode_runs_parts);
  if (!ties.empty()) c.line();
  for (const auto& tie : ties) c.line("static_assert(" + tie + ");");
  if (step_ops) {
    c.line();
    emit_decode_step_wrapper(c);
  }
  c.line();
  c.line("}  // namespace " + spec.ns());
  return c.str();
}

}  // namespace kiln::codegen
