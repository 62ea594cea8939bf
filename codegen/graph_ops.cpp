// Graph ops: building them (make_*), what they read and write (from their records), checking
// their bindings, and sharing one kernel between ops whose calls render the same.
#include <algorithm>
#include <initializer_list>

#include "codegen/graph_build.hpp"
#include "runtime/core/error.hpp"
#include "runtime/model/rank_slice.hpp"

namespace kiln::codegen {

namespace {

std::vector<std::string> bound(const Op& op, std::initializer_list<ArgSource> sources) {
  std::vector<std::string> out;
  for (const ArgSpec& a : op.record().args) {
    if (std::find(sources.begin(), sources.end(), a.source) == sources.end()) continue;
    auto it = op.args.find(a.name);
    if (it != op.args.end()) out.push_back(it->second);
  }
  return out;
}

}  // namespace

std::vector<std::string> Op::reads() const { return bound(*this, {ArgSource::in, ArgSource::in_opt, ArgSource::inout}); }
std::vector<std::string> Op::writes() const { return bound(*this, {ArgSource::out, ArgSource::inout}); }
bool has_beside_ops(const Graph& g) {
  const std::vector<const Op*> ops = g.all_ops();
  return std::any_of(ops.begin(), ops.end(), [](const Op* op) { return op->beside; });
}
bool reads_any_of(const Op& op, const std::vector<std::string>& buffers) {
  const std::vector<std::string> reads = op.reads();
  return std::any_of(reads.begin(), reads.end(),
                     [&](const std::string& r) { return std::find(buffers.begin(), buffers.end(), r) != buffers.end(); });
}
std::vector<std::string> Op::weights() const {
  return bound(*this, {ArgSource::weight, ArgSource::weight_opt, ArgSource::matrix});
}

Op make_op(OpKind kind, const std::string& label, const std::string& math, std::map<std::string, std::string> args,
           std::map<std::string, std::string> shape, const std::string& kernel) {
  Op op{kind};
  op.label = label;
  op.math = math;
  op.args = std::move(args);
  op.shape = std::move(shape);
  op.kernel = kernel;
  return op;
}

Op make_rmsnorm(const Graph& g, const std::string& weight, const std::string& in, const std::string& out,
                const std::string& dim) {
  return make_op(OpKind::rmsnorm, weight,
                 out + " = RMSNorm(" + in + ") · " + weight + "   (" + num(g.value(dim)) + " features)",
                 {{"x", in}, {"weight", weight}, {"out", out}}, {{"dim", dim}, {"eps", "kRmsNormEps"}},
                 "rmsnorm_" + num(g.value(dim)));
}

Op make_rope(const std::string& label, const std::string& buffer, const std::string& math, const std::string& heads,
             const std::string& head_stride, const std::string& rotary_dim, const std::string& row,
             const std::string& offset, bool interleaved, const std::string& kernel) {
  return make_op(OpKind::rope, label, math, {{"rows", buffer}},
                 {{"heads", heads}, {"head_stride", head_stride}, {"rotary_dim", rotary_dim}, {"row", row},
                  {"offset", offset}, {"interleaved", interleaved ? "true" : "false"}},
                 kernel);
}

Op make_linear(const Graph& g, const std::string& label, const std::string& weight, const std::string& in,
               const std::string& out, const std::string& n, const std::string& k, LinearOut result,
               const std::string& detail, const std::string& rows) {
  const std::string product =
      in + "[" + rows + ", " + num(g.value(k)) + "] · " + weight + "[" + num(g.value(n)) + ", " + num(g.value(k)) + "]ᵀ";
  std::string math;
  switch (result) {
    case LinearOut::store_bf16: math = out + " = " + product; break;
    case LinearOut::add_f32: math = out + " += " + product + "   (residual add fused)"; break;
    case LinearOut::store_f32: math = out + " = " + product + "   (fp32)"; break;
  }
  if (!detail.empty()) math += "   " + detail;
  Op op = make_op(OpKind::linear, label, math, {{"in", in}, {"weight", weight}, {"out", out}},
                  {{"n", n}, {"k", k}, {"out", linear_out_name(result)}, {"sms", "kTargetSms"}, {"stacked", "false"},
                   {"rank_slice", "false"}},
                  "linear_" + weight);
  op.rows = rows;
  return op;
}

Op make_all_reduce(const ModelSpec& s, const std::string& x, const std::string& detail) {
  return make_op(OpKind::all_reduce, "all_reduce",
                 x + " = Σ over the " + num(s.ranks) + " ranks of " + x + "   (all-reduce in place; " + detail + ")",
                 {{"x", x}}, {{"dim", "kHiddenSize"}, {"ranks", "kRanks"}, {"warm_rows", "0"}, {"warm_cols", "0"}},
                 "all_reduce_" + x);
}

namespace {

// The weight of a projection worth warming: a linear op reading at least 1 MiB.
const std::string* warmable(const Graph& g, const Op& op) {
  if (op.kind != OpKind::linear) return nullptr;
  const std::string& field = op.args.at("weight");
  int64_t bytes = 2;
  for (int64_t d : g.weight(field).shape) bytes *= d;
  return bytes >= (1 << 20) ? &field : nullptr;
}

}  // namespace

void bind_warm_weights(Graph& g) {
  for (LayerBlock& block : g.blocks) {
    std::vector<Op*> ops;
    for (auto& [stage, stage_ops] : block.stages) {
      for (Op& op : stage_ops) ops.push_back(&op);
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      Op& reduce = *ops[i];
      if (reduce.kind != OpKind::all_reduce) continue;
      const Op* next = nullptr;
      bool next_layer = false;
      for (size_t j = i + 1; j < ops.size() && next == nullptr; ++j) {
        if (warmable(g, *ops[j])) next = ops[j];
      }
      for (size_t j = 0; j < i && next == nullptr; ++j) {  // the next layer's first projection
        if (warmable(g, *ops[j])) {
          next = ops[j];
          next_layer = true;
        }
      }
      if (next == nullptr) continue;
      const std::string& field = next->args.at("weight");
      reduce.args["warm"] = field;
      reduce.shape["warm_rows"] = next->shape.at("n");
      reduce.shape["warm_cols"] = next->shape.at("k");
      if (next_layer) reduce.warm_layer_end = g.layer_bound(block.last);
      reduce.kernel += "_warm_" + std::string(next_layer ? "next_" : "") + field;
      reduce.math += "; warms " + std::string(next_layer ? "the next layer's " : "") + field + " in L2 meanwhile";
    }
  }
}

void add_residual_projection(const ModelSpec& s, const Graph& g, std::vector<Op>& ops, const std::string& label,
                             const std::string& weight, const std::string& in, const std::string& k, bool reduce) {
  if (s.ranks == 1) {
    ops.push_back(make_linear(g, label, weight, in, "x", "kHiddenSize", k, LinearOut::add_f32, ""));
    return;
  }
  Op first = make_linear(g, label, weight, in, "x", "kHiddenSize", k, LinearOut::add_f32, "(rank 0: its share)");
  first.rank_case = "first";
  Op others = make_linear(g, label, weight, in, "x", "kHiddenSize", k, LinearOut::store_f32, "(the other ranks: theirs)");
  others.rank_case = "others";
  others.kernel += "_share";
  ops.push_back(first);
  ops.push_back(others);
  if (reduce) ops.push_back(make_all_reduce(s, "x", "rank 0's x holds the residual"));
}

std::string linear_out_name(LinearOut result) {
  switch (result) {
    case LinearOut::store_bf16: return "LinearOut::store_bf16";
    case LinearOut::add_f32: return "LinearOut::add_f32";
    case LinearOut::store_f32: return "LinearOut::store_f32";
  }
  fail("internal: unknown LinearOut");
}

Op make_silu_mul(const std::string& label, const std::string& in, const std::string& out, const std::string& dim,
                 const Graph& g, const std::string& rows_per_token) {
  Op op = make_op(OpKind::silu_mul, label, out + " = silu(gate) ⊙ up   (" + num(g.value(dim)) + " features)",
                  {{"gate_up", in}, {"act", out}}, {{"dim", dim}}, "silu_mul_" + out);
  if (!rows_per_token.empty()) {
    op.rows = "T * " + rows_per_token;
    op.math += ", for each of a token's " + num(g.value(rows_per_token)) + " chosen experts";
  }
  return op;
}

// The initializer of an op's shape constant: "{.dim = kHiddenSize, .eps = kRmsNormEps}", members in
// the record's order.
std::string shape_init(const Op& op) {
  std::string out;
  for (const ShapeMember& m : op.record().shape) out += (out.empty() ? "." : ", .") + m.name + " = " + op.shape.at(m.name);
  return "{" + out + "}";
}

namespace {

bool is_buffer(ArgSource s) {
  return s == ArgSource::in || s == ArgSource::in_opt || s == ArgSource::out || s == ArgSource::inout;
}
bool is_weight(ArgSource s) {
  return s == ArgSource::weight || s == ArgSource::weight_opt || s == ArgSource::matrix || s == ArgSource::warm;
}

// Every op binds exactly its record's arguments and shape members, with values of the right kind:
// a mistake in a graph builder stops kilnc here, not the C++ compiler later.
void check_op(const Graph& g, const Op& op) {
  const OpRecord& r = op.record();
  const std::string where = "internal: op " + r.name + " (" + op.label + ")";
  for (const auto& arg : op.args) {
    // Named copies, not structured bindings: lambdas capture those only from C++20 compilers on
    // (the sanitizer build's clang 14 refuses).
    const std::string& name = arg.first;
    const std::string& value = arg.second;
    const auto it = std::find_if(r.args.begin(), r.args.end(), [&](const ArgSpec& a) { return a.name == name; });
    if (it == r.args.end()) fail(where, " binds '", name, "', which its record does not have");
    if (is_buffer(it->source)) {
      if (value != "logits") g.buffer(value);  // throws when absent; logits is the caller's output
      if (it->source == ArgSource::in_opt && g.buffer(value).elem != Elem::f32) {
        fail(where, " binds '", name, "' to ", value, ", which is not fp32 (in_opt arguments are)");
      }
    } else if (is_weight(it->source) || it->source == ArgSource::fp8) {
      if (std::none_of(g.weights.begin(), g.weights.end(), [&](const WeightDecl& w) { return w.field == value; })) {
        fail(where, " binds '", name, "' to unknown weight ", value);
      }
    } else {
      fail(where, " binds '", name, "', which comes from the step or the context");
    }
  }
  for (const ArgSpec& a : r.args) {
    const bool needed = (is_buffer(a.source) && a.source != ArgSource::in_opt) || a.source == ArgSource::weight ||
                        a.source == ArgSource::matrix;
    if (needed && !op.args.count(a.name)) fail(where, " leaves argument '", a.name, "' unbound");
  }
  for (const ShapeMember& m : r.shape) {
    auto it = op.shape.find(m.name);
    if (it == op.shape.end()) fail(where, " leaves shape member '", m.name, "' unbound");
    const std::string& v = it->second;
    bool ok = false;
    if (m.type == "int") ok = v == "0" || (v.starts_with("k") && !g.constant(v).is_real);
    if (m.type == "float") ok = v.starts_with("k") && g.constant(v).is_real;
    if (m.type == "bool") ok = v == "true" || v == "false";
    if (m.type == "LinearOut") ok = v.starts_with("LinearOut::");
    if (!ok) fail(where, " binds shape member ", m.type, " ", m.name, " to '", v, "'");
  }
  if (op.shape.size() != r.shape.size()) fail(where, " binds shape members its record does not have");
  for (const Op& part : op.parts) check_op(g, part);
}

// Visits every op, fused parts included, in graph order.
template <typename F>
void for_each_op(Graph& g, F&& f) {
  for (auto& op : g.prologue) visit_op_and_parts(op, f);
  for (auto& block : g.blocks) {
    for (auto& [stage, ops] : block.stages) {
      for (auto& op : ops) visit_op_and_parts(op, f);
    }
  }
  for (auto& op : g.epilogue) visit_op_and_parts(op, f);
}

}  // namespace

void check_bindings(const Graph& g) {
  for (const Op* op : g.all_ops()) check_op(g, *op);
}

// A weight every op reads through a `matrix` argument (the linear ops, the embedding lookup) is a
// matrix; one that any other op reads as rows (MLA's absorbed kv_b_proj) stays bf16. The L2
// warm-up only prefetches its bytes, so it does not count. A matrix only the embedding lookup
// reads is a lookup table.
void mark_matrix_weights(Graph& g) {
  std::map<std::string, bool> matrix, lookup;  // field -> every use so far is a matrix argument / an embed op's
  for_each_op(g, [&](const Op& op) {
    for (const ArgSpec& a : op.record().args) {
      const auto it = op.args.find(a.name);
      if (it == op.args.end() || !is_weight(a.source) || a.source == ArgSource::warm) continue;
      const bool as_matrix = a.source == ArgSource::matrix;
      matrix[it->second] = matrix.emplace(it->second, as_matrix).first->second && as_matrix;
      lookup[it->second] = lookup.emplace(it->second, true).first->second && op.kind == OpKind::embed;
    }
  });
  for (WeightDecl& w : g.weights) {
    const auto it = matrix.find(w.field);
    w.matrix = it != matrix.end() && it->second;
    w.lookup = w.matrix && lookup.at(w.field);
  }
  // A linear op's `stacked`: its matrix is stacked from tensors of its own (q | k | v, gate | up),
  // which a GGUF file may store in two block formats (GpuMatrix::split). Its `rank_slice`: the
  // matrix is a tensor-parallel rank's slice, which the loader holds as bf16 rows only (no
  // quantized kernel is instantiated for it: runtime/model/rank_slice.hpp). A linear_act's, its
  // linear part's (the same matrix).
  for_each_op(g, [&](Op& op) {
    if (op.kind != OpKind::linear && op.kind != OpKind::linear_act) return;
    const WeightDecl& w = g.weight(op.args.at("weight"));
    bool stacked = false, rank_slice = false;
    for (const auto& layout : w.layouts) {
      bool sliced = false;
      for (const WeightSource& s : layout) sliced |= is_rank_slice(s);
      stacked |= w.matrix && w.experts == 0 && layout.size() > 1 && !sliced;
      rank_slice |= sliced;
    }
    op.shape.at("stacked") = stacked ? "true" : "false";
    op.shape.at("rank_slice") = rank_slice ? "true" : "false";
  });
}

// Ops whose calls render the same (same op, same shape text) share one kernel wrapper and shape
// constant: the first op's name wins, so names stay stable and readable. One name for two different
// shapes would be a graph builder's mistake.
void share_kernels(Graph& g) {
  std::map<std::string, std::string> name_of_call, call_of_name;
  for_each_op(g, [&](Op& op) {
    const std::string call = op.record().name + shape_init(op);
    op.kernel = name_of_call.emplace(call, op.kernel).first->second;
    if (call_of_name.emplace(op.kernel, call).first->second != call) {
      fail("internal: kernel name ", op.kernel, " names two different calls");
    }
  });
}

}  // namespace kiln::codegen
