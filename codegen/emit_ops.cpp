#include "codegen/emit_ops.hpp"

#include "runtime/core/error.hpp"

namespace kiln::codegen {

namespace {

bool is_array_field(const std::string& field) {
  return field == "token_ids" || field == "positions" || field == "slot_mapping" || field == "logit_rows" ||
         field == "query_start" || field == "context_len" || field == "block_tables";
}

// The element type of a buffer on the GPU (bf16 activations) or in the reference (fp32).
std::string elem_type(const Graph& g, const std::string& buffer, bool gpu) {
  if (buffer == "logits") return "float";  // the forward's output, not an arena buffer
  switch (g.buffer(buffer).elem) {
    case Elem::bf16: return gpu ? "bf16" : "float";
    case Elem::f32: return "float";
    case Elem::i32: return gpu ? "int" : "int32_t";
  }
  fail("internal: unknown buffer element type");
}

// A kernel wrapper's parameter type for argument `a` of `op`.
std::string cuda_param_type(const Op& op, const Graph& g, const ArgSpec& a) {
  switch (a.source) {
    case ArgSource::in: return "const " + elem_type(g, op.args.at(a.name), true) + "*";
    case ArgSource::in_opt: return "const float*";  // fp32 rows (check_op)
    case ArgSource::out:
    case ArgSource::inout: return elem_type(g, op.args.at(a.name), true) + "*";
    case ArgSource::weight:
    case ArgSource::weight_opt:
    case ArgSource::warm: return "const bf16*";
    case ArgSource::matrix: return "GpuMatrix";
    case ArgSource::rows:
    case ArgSource::layer: return "int";
    case ArgSource::step: return is_array_field(a.name) ? "const int*" : "int";
    case ArgSource::kv: return "bf16*";
    case ArgSource::ctx:
      if (a.name == "rope") return "const float*";
      if (a.name == "scratch") return "float*";
      if (a.name == "decode_counters") return "unsigned*";
      if (a.name == "expert_usage") return "unsigned char*";
      if (a.name == "rank") return "int";
      fail("internal: ops.def: unknown context field ", a.name);
    case ArgSource::fp8: return "Fp8Rows";
    case ArgSource::sums: return "PendingSums*";
  }
  fail("internal: unknown argument source");
}

// A weight as bf16 rows on the GPU: a GpuMatrix's data (the L2 warm-up reads bytes; tensor
// parallelism, which warms, keeps matrices in bf16).
std::string bf16_rows(const Graph& g, const std::string& expr, const std::string& field) {
  return g.weight(field).matrix ? "static_cast<const bf16*>(" + expr + ".data)" : expr;
}

// What the forward passes for argument `a` of `op` (`gpu`: forward.cu, else forward_ref.cpp).
std::string arg_expr(const Op& op, const Graph& g, const ArgSpec& a, bool gpu) {
  switch (a.source) {
    case ArgSource::in:
    case ArgSource::out:
    case ArgSource::inout: return op.args.at(a.name);
    case ArgSource::weight:
    case ArgSource::matrix: return weight_expr(g, op.args.at(a.name));
    case ArgSource::weight_opt: return op.args.count(a.name) ? weight_expr(g, op.args.at(a.name)) : "nullptr";
    case ArgSource::in_opt: return op.args.count(a.name) ? op.args.at(a.name) : "nullptr";
    case ArgSource::warm:
      if (!op.args.count(a.name)) return "nullptr";
      if (op.warm_layer_end.empty()) return bf16_rows(g, weight_expr(g, op.args.at(a.name)), op.args.at(a.name));
      return "layer + 1 < " + op.warm_layer_end + " ? " +
             bf16_rows(g, "w.layers[layer + 1]." + op.args.at(a.name), op.args.at(a.name)) + " : nullptr";
    case ArgSource::rows: return op.rows;
    case ArgSource::layer: return "layer";
    case ArgSource::kv: return "kv";
    case ArgSource::ctx: return "ctx." + a.name;
    case ArgSource::fp8:
      if (!op.args.count(a.name)) return "Fp8Rows{}";
      return std::string(op.fp8_per_head ? "cuda::fp8_head_inputs_for(ctx, " : "cuda::fp8_inputs_for(ctx, ") +
             weight_expr(g, op.args.at(a.name)) + ")";
    case ArgSource::sums: return op.pending_sums.empty() ? "nullptr" : op.pending_sums;
    case ArgSource::step:
      if (a.name == "step") return "step";
      if (gpu) return "step." + a.name;
      return "step." + a.name + (is_array_field(a.name) ? ".data()" : "()");
  }
  fail("internal: unknown argument source");
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

std::string wrapper_name(const Op& op, Phase phase) {
  if (!op.record().split_phases()) return op.kernel;
  return op.kernel + (phase == Phase::prefill ? "_prefill" : "_decode");
}

}  // namespace

std::string weight_expr(const Graph& g, const std::string& field) {
  return (g.weight(field).per_layer ? "lw." : "w.") + field;
}

std::string shape_constant(const Op& op) {
  std::string out = "k";
  bool upper = true;
  for (char c : op.kernel) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper && c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
    upper = false;
  }
  return out;
}

namespace {

// The wrappers `phase` calls for `op`: its own, or its parts' where the phase runs those.
void phase_kernels(const Op& op, const Graph& g, Phase phase, std::vector<CudaKernel>& out) {
  const CallSpec& call = op.record().call(phase);
  if (call.how == CallHow::parts) {
    for (const Op& part : op.parts) phase_kernels(part, g, phase, out);
    return;
  }
  if (call.how != CallHow::kernel) return;
  // A decode step past one GEMV pass runs linear_act's parts (op_call): its silu_mul's wrapper too.
  if (phase == Phase::decode && op.kind == OpKind::linear_act && g.decode_gemm_past_pass) {
    phase_kernels(op.parts.back(), g, phase, out);
  }
  const std::string name = wrapper_name(op, phase);
  std::vector<std::string> params, names;
  for (const ArgSpec* a : op.record().args_of(phase)) {
    params.push_back(cuda_param_type(op, g, *a) + " " + a->name);
    names.push_back(a->name);
  }
  params.push_back("cudaStream_t stream");
  names.push_back("stream");
  out.push_back({name, "void " + name + "(" + join(params) + ")",
                 call.function + "<" + shape_constant(op) + ">(" + join(names) + ");", &op});
}

void phase_headers(const Op& op, Phase phase, std::vector<std::string>& out) {
  const CallSpec& call = op.record().call(phase);
  if (call.how == CallHow::parts) {
    for (const Op& part : op.parts) phase_headers(part, phase, out);
  } else if (call.how == CallHow::kernel) {
    out.push_back(op.record().template_header);
  }
}

// The arguments of the op's prefill call on cuBLASLt, "ctx" first, without its FP8 inputs: their
// expression goes to *fp8, the matrix's to *weight, where asked.
std::vector<std::string> host_args_without_fp8(const Op& op, const Graph& g, std::string* fp8, std::string* weight) {
  std::vector<std::string> args = {"ctx"};
  for (const ArgSpec* a : op.record().args_of(Phase::prefill)) {
    const std::string expr = arg_expr(op, g, *a, true);
    if (a->source == ArgSource::fp8) {
      if (fp8 != nullptr) *fp8 = expr;
      continue;
    }
    args.push_back(expr);
    if (a->source == ArgSource::matrix && weight != nullptr) *weight = expr;
  }
  return args;
}

// The prefill's logits projection (rows "N"): cuda::prefill_logits (gemm.hpp), the rows a token is
// sampled from on the op's decode kernel, the others on cuBLASLt.
std::string prefill_logits_call(const Op& op, const Graph& g) {
  std::string fp8;
  std::vector<std::string> args = host_args_without_fp8(op, g, &fp8, nullptr);
  if (!fp8.empty() && fp8 != "Fp8Rows{}") {
    fail("internal: the logits projection ", op.label, " was given FP8 inputs (", fp8, ")");
  }
  args.push_back("step.num_samples");
  args.push_back(wrapper_name(op, Phase::decode));
  return "cuda::prefill_logits<" + shape_constant(op) + ">(" + join(args) + ");";
}

// Graph::decode_gemm_past_pass: a decode step that cuda::decode_on_gemm gives to cuBLASLt calls
// cuda::decode_linear with the linear's prefill arguments (on the stream: ctx.fork gives no side
// stream past a pass) but its FP8 inputs (no op writes them at decode; it takes bf16 matrices
// only). The branch's opening line and its call; the kernel goes in the else branch.
struct GemmBranch {
  std::string condition, call;
};
GemmBranch decode_gemm_branch(const Op& linear, const Graph& g) {
  std::string weight;
  const std::vector<std::string> host = host_args_without_fp8(linear, g, nullptr, &weight);
  if (linear.record().call(Phase::prefill).how != CallHow::host) fail("internal: linear's prefill call is not cuBLASLt's");
  if (weight.empty()) fail("internal: linear's prefill call takes no matrix argument");
  return {"if (cuda::decode_on_gemm(ctx, " + weight + ", " + linear.rows + ")) {",
          "cuda::decode_linear<" + shape_constant(linear) + ">(" + join(host) + ");"};
}

}  // namespace

std::vector<CudaKernel> cuda_kernels(const Op& op, const Graph& g) {
  std::vector<CudaKernel> out;
  for (Phase phase : {Phase::prefill, Phase::decode}) phase_kernels(op, g, phase, out);
  return out;  // a wrapper both phases call appears twice (the caller keeps one)
}

std::vector<std::string> cuda_headers(const Op& op) {
  std::vector<std::string> out;
  for (Phase phase : {Phase::prefill, Phase::decode}) phase_headers(op, phase, out);
  return out;
}

std::vector<std::string> ref_headers(const Op& op) {
  if (op.record().call(Phase::ref).how != CallHow::parts) return {op.record().ref_header};
  std::vector<std::string> out;
  for (const Op& part : op.parts) {
    for (const auto& h : ref_headers(part)) out.push_back(h);
  }
  return out;
}

std::vector<std::string> op_call(const Op& op, const Graph& g, Phase phase) {
  const CallSpec& call = op.record().call(phase);
  const bool gpu = phase != Phase::ref;
  // An op beside the others (Op::beside): the side stream; at decode a scratch of its own (one
  // kernel), at prefill cuBLASLt's runner of its own too (CudaContext::beside).
  const bool side = op.beside && gpu;
  std::vector<std::string> args;
  for (const ArgSpec* a : op.record().args_of(phase)) {
    args.push_back(side && a->source == ArgSource::ctx && a->name == "scratch" ? "ctx.side_scratch"
                                                                              : arg_expr(op, g, *a, gpu));
  }
  if (side && phase == Phase::decode && call.how != CallHow::kernel) {
    fail("internal: op ", op.record().name, " runs beside others as one kernel only");
  }
  switch (call.how) {
    case CallHow::kernel:
      if (gpu) {
        args.push_back(side ? "side" : "stream");
        const std::string kernel = wrapper_name(op, phase) + "(" + join(args) + ");";
        if (phase == Phase::decode && op.kind == OpKind::linear && g.decode_gemm_past_pass) {
          const GemmBranch gemm = decode_gemm_branch(op, g);
          return {gemm.condition, "  " + gemm.call, "} else {", "  " + kernel, "}"};
        }
        if (phase == Phase::decode && op.kind == OpKind::linear_act && g.decode_gemm_past_pass) {
          // A step cuBLASLt takes runs the parts: the linear on cuBLASLt, then silu_mul's kernel.
          const GemmBranch gemm = decode_gemm_branch(op.parts.front(), g);
          const std::vector<std::string> act = op_call(op.parts.back(), g, phase);
          if (act.size() != 1) fail("internal: linear_act's silu_mul does not render as one call");
          return {gemm.condition, "  " + gemm.call, "  " + act[0], "} else {", "  " + kernel, "}"};
        }
        return {kernel};
      }
      args.insert(args.begin(), shape_constant(op));  // ref::<op>(shape, args...)
      return {call.function + "(" + join(args) + ");"};
    case CallHow::host:  // cuda::linear<shape>(ctx, args...): cuBLASLt, launched from the host side
      if (op.kind == OpKind::linear && op.rows == "N") return {prefill_logits_call(op, g)};
      args.insert(args.begin(), side ? "ctx.beside(side)" : "ctx");
      return {call.function + "<" + shape_constant(op) + ">(" + join(args) + ");"};
    case CallHow::parts: {
      std::vector<std::string> out;
      for (const Op& part : op.parts) {
        for (const auto& stmt : op_call(part, g, phase)) out.push_back(stmt);
      }
      return out;
    }
    case CallHow::none:
      fail("op ", op.record().name, " (", op.label, ") has no kernel of its own on the GPU: it runs fused into ",
           call.function, ", and this model's graph did not fuse it (see codegen/fuse.cpp)");
  }
  fail("internal: unknown call");
}

}  // namespace kiln::codegen
