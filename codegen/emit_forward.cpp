// forward.cu and forward_ref.cpp: the graph as a launch sequence (CUDA, prefill and decode) and as
// a sequence of reference-op calls (CPU). Both read like the model card: one stage comment per
// stage, one math comment per op, a loop over the layers.
#include <algorithm>
#include <cctype>
#include <set>

#include "codegen/decode_step.hpp"
#include "codegen/emit.hpp"
#include "codegen/emit_ops.hpp"
#include "codegen/graph_build.hpp"
#include "runtime/core/error.hpp"

namespace kiln::codegen {

namespace {

// The decode's mark after an op (CudaContext::mark, --profile's per-op timeline): the op's family
// and what it reads, in bytes from the shapes; a matrix in the bytes of the format the loader kept
// it in (a GGUF file's blocks, both parts of one in two formats: matrix_bytes of the GpuMatrix),
// read when the step runs; the embedding lookup reads one row of its table per token.
std::string mark_line(const Op& op, const Graph& g) {
  const std::vector<std::string> weights = op.weights();
  const bool named_by_weight = !weights.empty() && (op.kind == OpKind::linear || op.kind == OpKind::linear_act ||
                                                    op.kind == OpKind::rmsnorm || op.kind == OpKind::rmsnorm_rows ||
                                                    op.kind == OpKind::rmsnorm_inplace);
  const std::string family = named_by_weight ? weights.front() : op.record().name;
  const bool lookup = op.kind == OpKind::embed;
  std::string reads = lookup ? "token_rows" : "weights";
  int64_t bytes = 0;
  std::vector<std::string> matrices;  // kiln::matrix_bytes(...) of each matrix weight
  for (const std::string& field : weights) {
    const WeightDecl& w = g.weight(field);
    if (w.matrix && w.experts == 0 && w.shape.size() == 2) {
      matrices.push_back("kiln::matrix_bytes(" + weight_expr(g, field) + ", " +
                         std::to_string(lookup ? 1 : w.shape[0]) + ", " + std::to_string(w.shape[1]) + ")");
      continue;
    }
    int64_t elems = 1;
    for (int64_t d : w.shape) elems *= d;
    if (w.experts > 0) {
      reads = "experts";  // one expert's; the routing decides how many
      elems /= w.experts;
    }
    bytes += elems * 2;  // bf16
  }
  if (op.kind == OpKind::attention || op.kind == OpKind::prep_attention || op.kind == OpKind::mla_attention) {
    reads = "kv_cache";
  }
  std::string total = bytes > 0 || matrices.empty() ? std::to_string(bytes) : "";
  for (const std::string& m : matrices) total += (total.empty() ? "" : " + ") + m;
  return "ctx.mark(\"" + family + "\", OpReads::" + reads + ", " + total + ");";
}

// The math of an op's unfused parts, in order (the op's own when it has none).
void comment_parts(const Op& op, Code& c) {
  if (op.parts.empty()) c.comment(op.math);
  for (const Op& part : op.parts) comment_parts(part, c);
}

void emit_op(const Op& op, const Graph& g, Phase phase, Code& c) {
  // A fused op the phase runs as its parts: each part as an op of its own.
  if (op.record().call(phase).how == CallHow::parts && op.rank_case.empty()) {
    for (const Op& part : op.parts) emit_op(part, g, phase, c);
    return;
  }
  // Tensor parallelism: an op of rank 0 alone opens `if (ctx.rank == 0) {`, the next one (the other
  // ranks') closes it with its `else` branch.
  if (op.rank_case == "first") c.line("if (ctx.rank == 0) {");
  if (op.rank_case == "others") c.line("} else {");
  if (!op.rank_case.empty()) c.indent();
  // A host call with parts runs an algorithm of its own (MLA's expanded prefill): its own math.
  if (op.record().call(phase).how == CallHow::host) {
    c.comment(op.math);
  } else {
    comment_parts(op, c);
    if (!op.parts.empty() && phase != Phase::ref) c.comment("(one fused kernel)");
  }
  if (phase == Phase::decode && !op.pending_sums.empty()) {
    c.comment(op.kind == OpKind::linear ? "(where its column splits sum through scratch, the RMSNorm after it adds them)"
                                        : "(first adding into " + op.args.at("x") + " the split sums the projection before it left, if any)");
  }
  // The rows' FP8 inputs in their place, where the projection after the op is FP8 (fuse.cpp).
  for (const ArgSpec* a : op.record().args_of(phase)) {
    if (a->source != ArgSource::fp8 || op.kind == OpKind::linear || !op.args.count(a->name)) continue;
    const std::string& weight = op.args.at(a->name);
    c.comment("(written as " + weight + "'s FP8 inputs instead where " + weight + " is FP8)");
  }
  const std::vector<std::string> stmts = op_call(op, g, phase);
  for (const auto& stmt : stmts) c.line(stmt);
  if (phase == Phase::decode && !stmts.empty()) c.line(mark_line(op, g));
  if (!op.rank_case.empty()) c.dedent();
  if (op.rank_case == "others") c.line("}");
}

// Whether `code` names `id` as a whole identifier.
bool names(const std::string& code, const std::string& id) {
  const auto ident = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
  for (size_t at = code.find(id); at != std::string::npos; at = code.find(id, at + 1)) {
    const size_t end = at + id.size();
    if ((at == 0 || !ident(code[at - 1])) && (end == code.size() || !ident(code[end]))) return true;
  }
  return false;
}

// The arena buffers the phase's calls use (the MoE routing scratch is the GPU's alone: the CPU
// reference would declare it unused).
void emit_buffers(const Graph& g, Phase phase, Code& c) {
  const bool gpu = phase != Phase::ref;
  std::string calls;
  for (const Op* op : g.all_ops()) {
    for (const std::string& stmt : op_call(*op, g, phase)) calls += stmt + "\n";
  }
  for (const Buffer& b : g.buffers) {
    if (!names(calls, b.name)) continue;
    const std::string type = b.elem == Elem::i32 ? (gpu ? "int" : "int32_t") : b.elem == Elem::f32 || !gpu ? "float" : "bf16";
    const std::string base = gpu ? "ctx.arena" : "arena";
    const std::string plan = gpu ? "GpuArena::" : "RefArena::";
    c.line(pad(type + "* " + b.name + " = reinterpret_cast<" + type + "*>(" + base + " + " + plan + b.name + ");", 72) +
           "// [T, " + b.per_token + "] " + b.layout);
  }
}

std::string kv_decl(const Graph& g, Phase phase) {
  if (phase != Phase::ref) return "bf16* kv = ctx.kv_layer<bf16>(layer);";
  if (g.latent_kv) {
    return "const ref::LatentPages kv{ctx.kv_cache + layer * kv_layer_values, {kKvElemsPerToken}, kPageSize};";
  }
  return "const ref::KvPages kv = ref::kv_layer(ctx, layer * kv_layer_values, {kNumKvHeads, kHeadDim, kPageSize});";
}

// The fork before the first op beside the others (Op::beside), and the join before the first op
// that reads what they wrote; a layer may fork again after a join. The ops in between must not
// write what the side ops use (nothing orders them). Decode forks by ctx.fork (small steps only),
// prefill by ctx.fork_prefill.
struct SideStream {
  std::vector<std::string> reads, writes;  // the side ops' buffers since the fork
  bool declared = false;                   // `side` is declared in this layer
};
void side_stream_edges(const Op& op, Phase phase, SideStream& side, Code& c) {
  if (op.beside) {
    if (side.writes.empty()) {
      const std::string fork = phase == Phase::decode ? "ctx.fork(T);" : "ctx.fork_prefill();";
      if (side.declared) {
        c.line("side = " + fork + "   // again: the ops given `side` run beside the next ones, up to ctx.join");
      } else {
        c.line("cudaStream_t side = " + fork + "   // the ops given `side` run beside the next ones, up to ctx.join");
      }
      side.declared = true;
    }
    for (const std::string& r : op.reads()) side.reads.push_back(r);
    for (const std::string& w : op.writes()) side.writes.push_back(w);
    return;
  }
  if (side.writes.empty()) return;
  if (!reads_any_of(op, side.writes)) {
    for (const std::string& w : op.writes()) {
      if (std::find(side.reads.begin(), side.reads.end(), w) != side.reads.end()) {
        fail("internal: ", op.label, " writes ", w, " while the side stream may still read it");
      }
    }
    return;
  }
  c.line("ctx.join(side);   // " + op.label + " reads what the side stream wrote");
  side.reads.clear();
  side.writes.clear();
}

// Whether some op passes the decode's pending sums (fuse.cpp's pair_pending_sums).
bool pends_sums(const Graph& g) {
  const std::vector<const Op*> ops = g.all_ops();
  return std::any_of(ops.begin(), ops.end(), [](const Op* op) { return !op->pending_sums.empty(); });
}

void emit_body(const Graph& g, Phase phase, Code& c) {
  const bool gpu = phase != Phase::ref;
  c.line(gpu ? "const int T = step.num_tokens;   // tokens in this step" : "const int64_t T = step.num_tokens();   // tokens in this step");
  c.line(gpu ? "const int N = step.num_logits;   // rows that need logits" : "const int64_t N = step.num_logits();   // rows that need logits");
  if (gpu) {
    c.line("cudaStream_t stream = ctx.stream;");
  } else {
    c.line("char* arena = reinterpret_cast<char*>(ctx.arena);");
    c.line("const int64_t kv_layer_values = ctx.num_pages * kPageSize * kKvElemsPerToken;");
  }
  emit_buffers(g, phase, c);
  c.line();
  for (const Op& op : g.prologue) emit_op(op, g, phase, c);
  if (phase == Phase::decode && pends_sums(g)) {
    c.line();
    c.comment("A residual projection's column-split sums, where it leaves them in scratch for the RMSNorm");
    c.comment("right after it to add (templates/pending_sums.hpp).");
    c.line("PendingSums pending;");
  }

  for (const LayerBlock& block : g.blocks) {
    c.line();
    const std::string first = g.layer_bound(block.first), last = g.layer_bound(block.last);
    c.comment("---- " + block.name + " ----");
    c.line("for (int layer = " + first + "; layer < " + last + "; ++layer) {");
    c.indent();
    c.line(std::string("const LayerWeights<") + (gpu ? "bf16" : "float") + ">& lw = w.layers[layer];");
    c.line(kv_decl(g, phase));
    SideStream side;
    for (const auto& [stage, ops] : block.stages) {
      c.line();
      c.comment(stage);
      for (const Op& op : ops) {
        if (gpu) side_stream_edges(op, phase, side, c);
        emit_op(op, g, phase, c);
      }
    }
    if (!side.writes.empty()) fail("internal: an op beside the others in ", block.name, " that no later op waits for");
    c.dedent();
    c.line("}");
  }
  c.line();
  c.comment("---- logits ----");
  for (const Op& op : g.epilogue) emit_op(op, g, phase, c);
}

}  // namespace

std::string emit_forward_ref(const ModelSpec& spec, const Graph& g) {
  Code c;
  c.line(banner(spec, "The forward pass on the CPU reference backend: fp32, op for op the graph of forward.cu."));
  c.line("#include \"model.hpp\"");
  std::set<std::string> headers;
  for (const Op* op : g.all_ops()) {
    for (const auto& h : ref_headers(*op)) headers.insert(h);
  }
  for (const auto& h : headers) c.line("#include \"" + h + "\"");
  c.line();
  c.line("namespace " + spec.ns() + " {");
  c.line();
  c.line("namespace {");
  c.line();
  c.comment("One step over the flat batch `step`; writes logits [N, kVocabSize] for step.logit_rows.");
  c.line("void forward_ref(const Weights<float>& w, const StepBatch& step, const RefContext& ctx, float* logits) {");
  c.indent();
  emit_body(g, Phase::ref, c);
  c.dedent();
  c.line("}");
  c.line();
  c.line("class RefModel final : public RefForward {");
  c.line(" public:");
  c.line("  explicit RefModel(const WeightTable& weights) : w_(bind_weights<float>(weights)) {}");
  c.line("  void forward(const StepBatch& step, const RefContext& ctx, float* logits) const override {");
  c.line("    forward_ref(w_, step, ctx, logits);");
  c.line("  }");
  c.line();
  c.line(" private:");
  c.line("  Weights<float> w_;");
  c.line("};");
  c.line();
  c.line("}  // namespace");
  c.line();
  c.line("std::unique_ptr<RefForward> make_ref_forward(const WeightTable& weights) {");
  c.line("  return std::make_unique<RefModel>(weights);");
  c.line("}");
  c.line();
  c.line("}  // namespace " + spec.ns());
  return c.str();
}

std::string emit_forward_cu(const ModelSpec& spec, const Graph& g) {
  Code c;
  c.line(banner(spec, "The forward pass on the GPU: the prefill and decode graphs as launch sequences."));
  c.line("#include \"model.hpp\"");
  const auto step_ops = decode_step_ops(spec, g);
  if (step_ops) c.line("#include \"runtime/cuda/check.hpp\"");
  c.line("#include \"runtime/cuda/context.hpp\"");
  if (step_ops) c.line("#include \"runtime/cuda/decode_step_args.hpp\"");
  c.line("#include \"runtime/cuda/gemm.hpp\"");
  // Ops the host runs with no kernel of theirs in the other GPU phase (the collectives, MLA's
  // expanded prefill) come from their record's header.
  std::set<std::string> host_headers;
  for (const Op* op : g.all_ops()) {
    const OpRecord& r = op->record();
    const CallHow prefill = r.call(Phase::prefill).how, decode = r.call(Phase::decode).how;
    if ((prefill == CallHow::host && decode != CallHow::kernel) || (decode == CallHow::host && prefill != CallHow::kernel)) {
      host_headers.insert(r.template_header);
    }
  }
  for (const auto& h : host_headers) c.line("#include \"" + h + "\"");
  c.line();
  c.line("namespace " + spec.ns() + " {");
  c.line();
  c.line("namespace {");
  c.line();
  c.comment("Prefill: any flat batch (prompt chunks, decodes riding along). Projections use cuBLASLt;");
  c.comment("attention runs over each sequence's cached pages with a causal mask.");
  c.line("void forward_prefill(const Weights<bf16>& w, const CudaStep& step, const CudaContext& ctx, float* logits) {");
  c.indent();
  emit_body(g, Phase::prefill, c);
  c.dedent();
  c.line("}");
  c.line();
  c.comment("Decode: every sequence brings one new token. Projections are our GEMV kernels (weights read");
  c.comment("once for the whole batch); attention splits long contexts into partitions (PagedAttention V2).");
  c.comment("ctx.mark after each op: what it read, for --profile's per-op timeline (nothing without it).");
  c.line("void forward_decode(const Weights<bf16>& w, const CudaStep& step, const CudaContext& ctx, float* logits) {");
  c.indent();
  emit_body(g, Phase::decode, c);
  c.dedent();
  c.line("}");
  c.line();
  if (step_ops) {
    emit_decode_step_forward(*step_ops, c);
    c.line();
  }
  c.line("class CudaModel final : public CudaForward {");
  c.line(" public:");
  if (step_ops) {
    c.line("  explicit CudaModel(const WeightTable& weights)");
    c.line("      : w_(bind_weights<bf16>(weights)), step_w_(bind_decode_step(w_)) {}");
  } else {
    c.line("  explicit CudaModel(const WeightTable& weights) : w_(bind_weights<bf16>(weights)) {}");
  }
  c.line("  void prefill(const CudaStep& step, const CudaContext& ctx, float* logits) const override {");
  c.line("    forward_prefill(w_, step, ctx, logits);");
  c.line("  }");
  c.line("  void decode(const CudaStep& step, const CudaContext& ctx, float* logits) const override {");
  if (step_ops) {
    c.line("    // The whole-step kernel when the backend set up its counters (--megakernel).");
    c.line("    if (ctx.step_sync != nullptr && step.num_tokens <= kMegakernelMaxBatch) {");
    c.line("      forward_decode_step(step_w_, step, ctx, logits);");
    c.line("    } else {");
    c.line("      forward_decode(w_, step, ctx, logits);");
    c.line("    }");
  } else {
    c.line("    forward_decode(w_, step, ctx, logits);");
  }
  c.line("  }");
  c.line();
  c.line(" private:");
  c.line("  Weights<bf16> w_;");
  if (step_ops) c.line("  DecodeStepWeights<kNumLayers> step_w_;");
  c.line("};");
  c.line();
  c.line("}  // namespace");
  c.line();
  c.line("std::unique_ptr<CudaForward> make_cuda_forward(const WeightTable& weights) {");
  c.line("  return std::make_unique<CudaModel>(weights);");
  c.line("}");
  c.line();
  c.line("}  // namespace " + spec.ns());
  return c.str();
}

}  // namespace kiln::codegen
