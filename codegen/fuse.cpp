// The fusion pass: fewer kernel launches per layer, which is what small models are bound by
// (SmolLM2-135M's decode step is ~330 launches of ~2 µs in a CUDA graph against a 64 µs
// bandwidth floor). Chosen at codegen, per model; the CPU reference always runs every op.
//
//   attention_prep   [head_rmsnorm] + rope + kv_write on the fused qkv rows: one kernel, both
//                    phases (dense families); saves 0.5-1.7 µs per layer at decode on an H200.
//   mla_prep         MLA's kv_a_layernorm + RoPE of q and of k_rope + mla_kv_write: one kernel, both
//                    phases (four launches of ~2.4 µs each in a DeepSeek-V2-Lite decode step).
//   prep_attention   attention_prep + attention: at decode one kernel that also merges the
//                    split-KV partitions (three launches before); the prefill runs both parts.
//   linear_act       a linear over the stacked gate | up rows + the silu_mul of its rows: at decode
//                    one GEMV whose blocks hold each feature's gate and up rows and write silu(gate)
//                    ⊙ up (templates/linear_act.cuh; one launch fewer a layer); the prefill runs both
//                    parts (cuBLASLt has no such epilogue).
//   moe_gate_up_act  the routed experts' moe_gate_up + silu_mul: one kernel that applies the
//                    activation to its gate and up sums and never writes gate | up; at prefill the
//                    grouped GEMM's epilogue (DeepSeek-V2-Lite at 2,048 tokens on an H200: 417 ->
//                    391 us a layer), at decode the streaming kernel (one launch fewer a layer).
//   FP8 inputs       an RMSNorm, silu·mul or attention whose rows only the projection after it
//                    reads: in the prefill it writes them as that projection's FP8 inputs where the
//                    matrix is FP8 (templates/fp8_rows.hpp), so the GEMM skips its own pass over
//                    the rows (pair_fp8_inputs; not an op of its own: an `fp8` argument of both).
//   pending sums     a decode residual projection whose column splits sum through scratch leaves
//                    those sums to the RMSNorm right after it (pair_pending_sums; a `sums`
//                    argument of both): one launch fewer, the same bits.
//
// Folding RMSNorm or silu(gate)·up into the next projection's input load was built and measured
// too, and lost: every GEMV block recomputes the folded input, which costs more than the launch
// it saves (bench/RESULTS.md, 2026-11-21; again for the quantized GEMV, whose blocks copy their
// token rows into shared memory anyway, 2026-11-27 sixth session: Qwen3-8B FP8 +21% a token, the
// norm repeated by each of gate_up's 1,536 blocks after the wait for the op before). And with the
// row's Σx² computed once, by the residual projection as tile sums, the norm's launch gone: slower
// still (Llama-3.2-1B batch 1 +6%, 2026-12-07 sixty-third session). The projection after a norm
// already streams its first weights while the norm runs (PDL), so the launch cost little; folded,
// its fp32 inputs' registers halved those weights in flight or its warps an SM.
#include <algorithm>

#include "codegen/graph_build.hpp"
#include "templates/weight_matrix.hpp"

namespace kiln::codegen {

namespace {

// [head_rmsnorm] + rope + kv_write over `qkv` -> attention_prep.
void fuse_attention_prep(std::vector<Op>& ops) {
  for (size_t i = 0; i < ops.size(); ++i) {
    const bool norm = ops[i].kind == OpKind::head_rmsnorm;
    const size_t rope = norm ? i + 1 : i;
    if (rope + 1 >= ops.size() || ops[rope].kind != OpKind::rope || ops[rope + 1].kind != OpKind::kv_write) continue;
    const Op& r = ops[rope];
    if (r.shape.at("interleaved") != "false" || r.args.at("rows") != "qkv" || r.shape.at("offset") != "0") continue;
    const Op& kv = ops[rope + 1];
    Op prep = make_op(OpKind::attention_prep, "self_attn (q/k prep)", "", {{"qkv", "qkv"}},
                      {{"heads", "kNumHeads"}, {"kv_heads", kv.shape.at("kv_heads")}, {"head_dim", kv.shape.at("head_dim")},
                       {"row", kv.shape.at("row")}, {"page_size", kv.shape.at("page_size")},
                       {"qk_norm", norm ? "true" : "false"}, {"eps", "kRmsNormEps"}},
                      "attention_prep");
    if (norm) {
      prep.args["q_norm"] = ops[i].args.at("q_norm");
      prep.args["k_norm"] = ops[i].args.at("k_norm");
    }
    prep.parts.assign(ops.begin() + i, ops.begin() + rope + 2);
    for (const Op& part : prep.parts) prep.math += (prep.math.empty() ? "" : "; then ") + part.math;
    ops.erase(ops.begin() + i, ops.begin() + rope + 2);
    ops.insert(ops.begin() + i, prep);
  }
}

// attention_prep + the attention that reads its qkv rows -> prep_attention.
void fuse_prep_attention(std::vector<Op>& ops) {
  for (size_t i = 0; i + 1 < ops.size(); ++i) {
    const Op& prep = ops[i];
    const Op& attn = ops[i + 1];
    if (prep.kind != OpKind::attention_prep || attn.kind != OpKind::attention) continue;
    if (attn.args.at("q") != prep.args.at("qkv") || attn.shape.at("row") != prep.shape.at("row") ||
        attn.shape.at("page_size") != prep.shape.at("page_size")) {
      continue;
    }
    Op fused = make_op(OpKind::prep_attention, attn.label, prep.math + "; then " + attn.math,
                       {{"qkv", prep.args.at("qkv")}, {"out", attn.args.at("out")}}, {}, "prep_attention");
    for (const char* m : {"heads", "kv_heads", "head_dim", "row", "page_size", "qk_norm", "eps"}) {
      fused.shape[m] = prep.shape.at(m);
    }
    for (const char* m : {"scale", "partition", "max_partitions"}) fused.shape[m] = attn.shape.at(m);
    for (const char* w : {"q_norm", "k_norm"}) {
      if (prep.args.count(w)) fused.args[w] = prep.args.at(w);
    }
    fused.parts = {prep, attn};
    ops.erase(ops.begin() + i, ops.begin() + i + 2);
    ops.insert(ops.begin() + i, fused);
  }
}

// MLA: kv_a_layernorm (in place on kv_a) + RoPE of q + RoPE of kv_a + mla_kv_write -> mla_prep.
void fuse_mla_prep(std::vector<Op>& ops) {
  for (size_t i = 0; i + 3 < ops.size(); ++i) {
    const Op& norm = ops[i];
    const Op& rope_q = ops[i + 1];
    const Op& rope_k = ops[i + 2];
    const Op& write = ops[i + 3];
    if (norm.kind != OpKind::rmsnorm_inplace || rope_q.kind != OpKind::rope || rope_k.kind != OpKind::rope ||
        write.kind != OpKind::mla_kv_write) {
      continue;
    }
    const std::string& kv_a = write.args.at("kv_a");
    if (norm.args.at("rows") != kv_a || rope_k.args.at("rows") != kv_a || rope_q.args.at("rows") == kv_a ||
        rope_q.shape.at("interleaved") != "true" || rope_k.shape.at("interleaved") != "true" ||
        norm.shape.at("dim") != write.shape.at("latent") || rope_k.shape.at("offset") != write.shape.at("latent") ||
        rope_q.shape.at("rotary_dim") != write.shape.at("rope") || rope_k.shape.at("rotary_dim") != write.shape.at("rope")) {
      continue;
    }
    // The fused kernel leaves kv_a as it was (the parts normalize and rotate it in place): no later
    // op of the stage may read it.
    const bool read_later = std::any_of(ops.begin() + i + 4, ops.end(), [&](const Op& op) {
      const std::vector<std::string> reads = op.reads();
      return std::find(reads.begin(), reads.end(), kv_a) != reads.end();
    });
    if (read_later) continue;
    Op fused = make_op(OpKind::mla_prep, "self_attn (latent and rope prep)", "",
                       {{"q", rope_q.args.at("rows")}, {"kv_a", kv_a}, {"weight", norm.args.at("weight")}},
                       {{"heads", rope_q.shape.at("heads")}, {"nope", rope_q.shape.at("offset")},
                        {"rope", write.shape.at("rope")}, {"latent", write.shape.at("latent")},
                        {"page_size", write.shape.at("page_size")}, {"eps", norm.shape.at("eps")}},
                       "mla_prep");
    fused.parts.assign(ops.begin() + i, ops.begin() + i + 4);
    for (const Op& part : fused.parts) fused.math += (fused.math.empty() ? "" : "; then ") + part.math;
    ops.erase(ops.begin() + i, ops.begin() + i + 4);
    ops.insert(ops.begin() + i, fused);
  }
}

// Whether any op of the graph but a silu_mul reads `buffer` (fused ops' parts included).
bool read_by_other_than_silu_mul(const Graph& g, const std::string& buffer) {
  bool read = false;
  for (const Op* top : g.all_ops()) {
    visit_op_and_parts(*top, [&](const Op& op) {
      if (op.kind == OpKind::silu_mul || !op.parts.empty()) return;
      const std::vector<std::string> reads = op.reads();
      read |= std::find(reads.begin(), reads.end(), buffer) != reads.end();
    });
  }
  return read;
}

// A linear writing bf16 gate | up rows + the silu_mul of them -> linear_act, where no op but a
// silu_mul reads gate | up rows anywhere in the graph (the fused decode never writes them), both run
// over the same rows on the same stream, and on every rank alike.
void fuse_linear_act(const Graph& g, std::vector<Op>& ops) {
  for (size_t i = 0; i + 1 < ops.size(); ++i) {
    const Op& gate_up = ops[i];
    const Op& act = ops[i + 1];
    if (gate_up.kind != OpKind::linear || act.kind != OpKind::silu_mul ||
        gate_up.shape.at("out") != linear_out_name(LinearOut::store_bf16) || act.args.at("gate_up") != gate_up.args.at("out") ||
        g.value(gate_up.shape.at("n")) != 2 * g.value(act.shape.at("dim")) || gate_up.rows != act.rows ||
        gate_up.beside != act.beside || !gate_up.rank_case.empty() || !act.rank_case.empty()) {
      continue;
    }
    const std::string& rows = gate_up.args.at("out");
    if (read_by_other_than_silu_mul(g, rows)) continue;
    Op fused = make_op(OpKind::linear_act, gate_up.label, gate_up.math + "; then " + act.math,
                       {{"in", gate_up.args.at("in")}, {"weight", gate_up.args.at("weight")}, {"gate_up", rows},
                        {"act", act.args.at("act")}},
                       {{"n", gate_up.shape.at("n")}, {"k", gate_up.shape.at("k")}, {"sms", gate_up.shape.at("sms")},
                        {"stacked", gate_up.shape.at("stacked")}, {"rank_slice", gate_up.shape.at("rank_slice")},
                        {"dim", act.shape.at("dim")}},
                       "linear_act_" + gate_up.args.at("weight"));
    fused.rows = gate_up.rows;
    fused.beside = gate_up.beside;
    fused.parts = {gate_up, act};
    ops.erase(ops.begin() + i, ops.begin() + i + 2);
    ops.insert(ops.begin() + i, fused);
  }
}

// moe_gate_up + the silu_mul of its rows -> moe_gate_up_act.
void fuse_moe_gate_up_act(std::vector<Op>& ops) {
  for (size_t i = 0; i + 1 < ops.size(); ++i) {
    const Op& gate_up = ops[i];
    const Op& act = ops[i + 1];
    if (gate_up.kind != OpKind::moe_gate_up || act.kind != OpKind::silu_mul ||
        act.args.at("gate_up") != gate_up.args.at("out") || act.shape.at("dim") != gate_up.shape.at("inter")) {
      continue;
    }
    Op fused = make_op(OpKind::moe_gate_up_act, gate_up.label, gate_up.math + "; then " + act.math,
                       {{"h", gate_up.args.at("h")}, {"weight", gate_up.args.at("weight")}, {"ids", gate_up.args.at("ids")},
                        {"gate_up", gate_up.args.at("out")}, {"act", act.args.at("act")},
                        {"scratch", gate_up.args.at("scratch")}},
                       gate_up.shape, gate_up.kernel + "_act");
    fused.parts = {gate_up, act};
    ops.erase(ops.begin() + i, ops.begin() + i + 2);
    ops.insert(ops.begin() + i, fused);
  }
}

// Whether an op in `ops` from `from` on reads `buffer` before one writes it without reading it:
// `ended` tells whether such a writer was found.
bool read_before_written(const std::vector<Op*>& ops, size_t from, const std::string& buffer, bool& ended) {
  const auto has = [&](const std::vector<std::string>& names) {
    return std::find(names.begin(), names.end(), buffer) != names.end();
  };
  for (size_t i = from; i < ops.size() && !ended; ++i) {
    if (has(ops[i]->reads())) return true;
    ended = has(ops[i]->writes());
  }
  return false;
}

// The layer block's ops in order, one iteration.
std::vector<Op*> block_ops(LayerBlock& block) {
  std::vector<Op*> out;
  for (auto& stage : block.stages) {
    for (Op& op : stage.second) out.push_back(&op);
  }
  return out;
}

// The op that would write a projection's FP8 inputs in place of its rows, and the argument that
// names those rows (its FP8 inputs' argument: that name + "_fp8"): an RMSNorm, silu·mul or (the
// prefill runs prep_attention as its parts) the attention; nullptr for any other.
Op* fp8_producer(Op& op, std::string& rows_arg) {
  if ((op.kind == OpKind::prep_attention || op.kind == OpKind::linear_act) &&
      op.record().call(Phase::prefill).how == CallHow::parts) {
    for (Op& part : op.parts) {
      if (part.kind == OpKind::attention || part.kind == OpKind::silu_mul) return fp8_producer(part, rows_arg);
    }
    return nullptr;
  }
  switch (op.kind) {
    case OpKind::rmsnorm:
    case OpKind::attention: rows_arg = "out"; return &op;
    case OpKind::silu_mul: rows_arg = "act"; return &op;
    default: return nullptr;
  }
}

// Pairs an RMSNorm, silu·mul or attention with the projection right after it (FP8 inputs, above)
// where the projection has fp8_gemm_shape and reads the op's rows over the same tokens, and no op
// after it reads those rows before they are written again (in the FP8 case they are never
// written). Both bind `fp8` to the projection's weight. Tensor-parallel branches (rank_case) stay
// as they are.
void pair_fp8_inputs(Graph& g) {
  std::vector<Op*> epilogue;
  for (Op& e : g.epilogue) epilogue.push_back(&e);
  for (size_t b = 0; b < g.blocks.size(); ++b) {
    const std::vector<Op*> body = block_ops(g.blocks[b]);
    for (size_t i = 0; i + 1 < body.size(); ++i) {
      std::string rows_arg;
      Op* const producer = fp8_producer(*body[i], rows_arg);
      // A linear_act's prefill runs its parts: the projection is its linear.
      const bool act_parts = body[i + 1]->kind == OpKind::linear_act &&
                             body[i + 1]->record().call(Phase::prefill).how == CallHow::parts;
      Op& next = act_parts ? body[i + 1]->parts.front() : *body[i + 1];
      if (!producer || next.kind != OpKind::linear || !body[i]->rank_case.empty() || !next.rank_case.empty()) continue;
      Op& op = *producer;
      const std::string& rows = op.args.at(rows_arg);
      if (next.args.at("in") != rows || op.rows != "T" || next.rows != "T") continue;
      if (!fp8_gemm_shape(g.value(next.shape.at("n")), g.value(next.shape.at("k")))) continue;
      // After the projection: the rest of the layer; then, unless that wrote the rows, both the
      // layer's next iteration (up to the op, which writes them) and, after the block's last
      // layer, the later blocks and the logits.
      bool ended = false;
      if (read_before_written(body, i + 2, rows, ended)) continue;
      if (!ended) {
        bool wrap_ended = false, read = read_before_written(body, 0, rows, wrap_ended);
        for (size_t later = b + 1; later < g.blocks.size() && !ended && !read; ++later) {
          read = read_before_written(block_ops(g.blocks[later]), 0, rows, ended);
        }
        if (read || read_before_written(epilogue, 0, rows, ended)) continue;
      }
      const std::string weight = next.args.at("weight");
      op.args[rows_arg + "_fp8"] = weight;
      next.args["in_fp8"] = weight;
      op.fp8_per_head = next.fp8_per_head = op.kind == OpKind::attention;
    }
  }
}

// Pairs a decode residual projection (linear adding into an fp32 buffer) with the RMSNorm of that
// buffer right after it — in the layer, or, for the layer's last op, the next layer's first op (the
// block's last layer pairs with nothing) — so that where the projection's splits sum through
// scratch the norm adds them (templates/pending_sums.hpp): one launch fewer each. Both on the main
// stream (an op beside the others has a scratch of its own), in blocks without tensor-parallel
// branches (whose collectives come between).
void pair_pending_sums(Graph& g) {
  for (LayerBlock& block : g.blocks) {
    const std::vector<Op*> body = block_ops(block);
    const bool one_rank = std::all_of(body.begin(), body.end(), [](const Op* op) { return op->rank_case.empty(); });
    if (!one_rank || body.size() < 2) continue;
    for (size_t i = 0; i < body.size(); ++i) {
      Op& op = *body[i];
      const bool wraps = i + 1 == body.size();
      Op& next = *body[wraps ? 0 : i + 1];
      if (op.beside || next.beside) continue;
      if (op.kind != OpKind::linear || op.shape.at("out") != linear_out_name(LinearOut::add_f32) || op.rows != "T") continue;
      if (next.kind != OpKind::rmsnorm || next.args.at("x") != op.args.at("out") || next.rows != "T") continue;
      if (next.record().call(Phase::decode).how != CallHow::kernel) continue;
      op.pending_sums = wraps ? "layer + 1 < " + g.layer_bound(block.last) + " ? &pending : nullptr" : "&pending";
      next.pending_sums = "&pending";
    }
  }
}

}  // namespace

void fuse(Graph& g) {
  for (LayerBlock& block : g.blocks) {
    for (auto& [stage, ops] : block.stages) {
      if (g.latent_kv) {
        fuse_mla_prep(ops);
      } else {
        fuse_attention_prep(ops);
        fuse_prep_attention(ops);
      }
      fuse_moe_gate_up_act(ops);
      fuse_linear_act(g, ops);
    }
  }
  pair_fp8_inputs(g);
  pair_pending_sums(g);
}

}  // namespace kiln::codegen
