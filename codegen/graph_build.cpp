// ModelSpec -> Graph for the dense decoder families (Llama 3.x, SmolLM2, Qwen3), and the parts
// every family shares (constants, embedding, final norm, LM head, kernel sharing).
#include "codegen/graph_build.hpp"

#include "codegen/decode_step.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "runtime/core/error.hpp"
#include "templates/gemv_plan.hpp"

namespace kiln::codegen {

const Buffer& Graph::buffer(const std::string& name) const {
  for (const auto& b : buffers) {
    if (b.name == name) return b;
  }
  fail("internal: graph has no buffer '", name, "'");
}

const Constant& Graph::constant(const std::string& name) const {
  for (const auto& c : constants) {
    if (c.name == name) return c;
  }
  fail("internal: graph has no constant '", name, "'");
}

const WeightDecl& Graph::weight(const std::string& field) const {
  for (const auto& w : weights) {
    if (w.field == field) return w;
  }
  fail("internal: graph has no weight '", field, "'");
}

int64_t Graph::value(const std::string& name) const { return constant(name).int_value; }

std::string Graph::layer_bound(int64_t layer) const {
  if (layer == 0) return "0";
  for (const char* name : {"kNumLayers", "kFirstKDenseReplace"}) {
    for (const auto& c : constants) {
      if (c.name == name && c.int_value == layer) return name;
    }
  }
  return std::to_string(layer);
}

std::string Graph::define(const std::string& name, int64_t value, const std::string& origin) {
  for (const auto& c : constants) {
    if (c.name == name) {
      if (c.is_real || c.int_value != value) fail("internal: constant ", name, " defined twice with different values");
      return name;
    }
  }
  constants.push_back({name, false, "int", value, 0.0, origin});
  return name;
}

std::string Graph::define_real(const std::string& name, double value, const std::string& origin,
                               const std::string& type) {
  for (const auto& c : constants) {
    if (c.name == name) {
      if (!c.is_real || c.real_value != value) fail("internal: constant ", name, " defined twice with different values");
      return name;
    }
  }
  constants.push_back({name, true, type, 0, value, origin});
  return name;
}

std::vector<const Op*> Graph::all_ops() const {
  std::vector<const Op*> out;
  for (const auto& op : prologue) out.push_back(&op);
  for (const auto& block : blocks) {
    for (const auto& [stage, ops] : block.stages) {
      for (const auto& op : ops) out.push_back(&op);
    }
  }
  for (const auto& op : epilogue) out.push_back(&op);
  return out;
}

std::string fmt_real(double v) {
  // The shortest text that reads back as exactly v: "0.707", not "0.70699999999999996"; whole
  // numbers in full ("500000", not "5e+05").
  char text[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(text, sizeof text, "%.0f", v);
    return text;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(text, sizeof text, "%.*g", precision, v);
    if (std::strtod(text, nullptr) == v) break;
  }
  return text;
}

std::string hf_layer(const std::string& suffix) { return "model.layers.{L}." + suffix; }

std::string num(int64_t v) { return std::to_string(v); }


// The SM count of the common part with each target architecture (validate.cpp lists them): the
// GEMV spreads its rows and column splits over that many SMs. H100 and H200 SXM have 132 SMs; A100
// 108; the sm_86 and sm_89 figures are the largest parts (RTX A6000 / 3090: 84, L40S: 142).
int64_t target_sms(const std::string& arch) {
  if (arch == "sm_90" || arch == "sm_90a") return 132;
  if (arch == "sm_80") return 108;
  if (arch == "sm_86") return 84;
  if (arch == "sm_89") return 142;
  fail("internal: no SM count for target ", arch);
}

std::string per_rank(const ModelSpec& s, const std::string& origin) {
  return s.ranks > 1 ? origin + " / kRanks" : origin;
}

WeightSource row_shard(const ModelSpec& s, const std::string& name, int64_t rows, int64_t hf_rows, int64_t hf_cols,
                       int64_t rank_group) {
  if (s.ranks == 1) return {name, rows};
  WeightSource w{name, rows};
  w.rank_rows = rows;
  w.rank_group = rank_group;
  w.hf_rows = hf_rows;
  w.hf_cols = hf_cols;
  return w;
}

WeightSource column_shard(const ModelSpec& s, const std::string& name, int64_t rows, int64_t cols, int64_t hf_cols) {
  if (s.ranks == 1) return {name, rows};
  WeightSource w{name, rows};
  w.cols = cols;
  w.rank_cols = cols;
  w.hf_rows = rows;
  w.hf_cols = hf_cols;
  return w;
}

void define_common_constants(const ModelSpec& s, Graph& g) {
  g.define("kHiddenSize", s.hidden_size, "hidden_size");
  g.define("kNumLayers", s.num_hidden_layers, "num_hidden_layers");
  g.define("kVocabSize", s.vocab_size, "vocab_size");
  if (s.ranks > 1) {
    g.define("kRanks", s.ranks, "tensor-parallel ranks of this build (build.tensor_parallel)");
    g.define("kVocabShard", s.vocab_size / s.ranks, "vocab_size / kRanks: this rank's rows of the embedding and LM head");
  }
  g.define_real("kRmsNormEps", s.rms_norm_eps, "rms_norm_eps");
  g.define("kMaxContext", s.build.max_context, "build.max_context");
  g.define("kPageSize", s.build.kv_page_size, "build.kv_page_size: tokens per KV-cache page");
  g.define("kMaxBatch", s.build.max_batch, "build.max_batch: sequences decoded together");
  g.define("kMaxBatchedTokens", s.build.max_batched_tokens, "build.max_batched_tokens: tokens per step");
  define_rope_constants(s, g);
  const std::string& arch = s.build.gpu_archs.front();
  g.define("kTargetSms", target_sms(arch),
           "SMs of the first build.gpu_archs target (" + arch + "): sizes the decode GEMV's split, any GPU runs it");
}

// Split-KV decode attention (PagedAttention V2): each sequence's context is cut into partitions of
// kAttnPartition tokens, each reduced on its own, then merged; the partials live in GPU scratch,
// whose layout is the template's (kernels.cu asserts the size against it).
void define_decode_attention_constants(const ModelSpec& s, Graph& g, const std::string& heads,
                                       const std::string& value_dim) {
  const int64_t partition = s.build.attention_partition;
  const int64_t partitions = (s.build.max_context + partition - 1) / partition;
  g.define("kAttnPartition", partition, "build.attention_partition: decode attention tokens per split-KV partition");
  g.define("kAttnMaxPartitions", partitions, "ceil(kMaxContext / kAttnPartition)");
  g.define("kAttnScratchFloats", s.build.max_batch * g.value(heads) * partitions * (g.value(value_dim) + 2),
           "decode attention partials: kMaxBatch × heads × partitions × (value dims + max + sum)");
}

// The decode scratch: the attention's partials and the wide GEMV's partial sums
// (templates/gemv_plan.hpp) take it in turn.
void define_decode_scratch(const ModelSpec& s, Graph& g) {
  if (g.decode_gemm_past_pass) {
    g.define("kDecodeGemmAbove", kGemvPassTokens,
             "decode steps of more rows may run the bf16 projections on cuBLASLt (one GEMV pass: kGemvPassTokens; "
             "Graph::decode_gemm_past_pass)");
  }
  // The wide GEMV's partial sums of every decode projection (a linear_act's: of the linear it may
  // run), and of those beside the others (Op::beside), which take a scratch of their own since they
  // run while the others do.
  int64_t linear = 0, side = 0;
  for (const Op* top : g.all_ops()) {
    const Op* op = top->kind == OpKind::linear_act ? &top->parts.front() : top;
    if (op->kind != OpKind::linear) continue;
    const int64_t floats = gemv_scratch_floats(static_cast<int>(g.value(op->shape.at("n"))),
                                               static_cast<int>(g.value(op->shape.at("k"))),
                                               static_cast<int>(g.value("kTargetSms")), static_cast<int>(s.build.max_batch));
    linear = std::max(linear, floats);
    if (op->beside) side = std::max(side, floats);
  }
  g.define("kDecodeScratchFloats", std::max(g.value("kAttnScratchFloats"), linear),
           "decode scratch: the larger of kAttnScratchFloats and the wide decode GEMV's partial sums (" +
               std::to_string(linear) + ")");
  if (has_beside_ops(g)) g.define("kSideScratchFloats", side, "the side stream's decode GEMV partial sums (ops beside the others)");
  // The fused decode attention's merge counters (templates/prep_attention.cuh): a word per
  // (sequence, KV head), zeroed once; the block that merges a row of partitions zeroes it again.
  int64_t counters = 0;
  for (const Op* op : g.all_ops()) {
    if (op->kind == OpKind::prep_attention) {
      counters = std::max(counters, s.build.max_batch * g.value(op->shape.at("kv_heads")));
    }
  }
  g.define("kDecodeCounterWords", counters,
           "decode attention's merge counters: kMaxBatch × KV heads (0: no fused decode attention)");
}

void define_rope_constants(const ModelSpec& s, Graph& g) {
  const RopeSpec& r = s.rope;
  g.define_real("kRopeTheta", r.theta, "rope_theta", "double");
  if (r.type == RopeType::standard) return;
  g.define_real("kRopeFactor", r.factor, "rope_scaling.factor", "double");
  g.define("kRopeOriginalMaxPositions", r.original_max_position_embeddings, "rope_scaling.original_max_position_embeddings");
  if (r.type == RopeType::llama3) {
    g.define_real("kRopeLowFreqFactor", r.low_freq_factor, "rope_scaling.low_freq_factor", "double");
    g.define_real("kRopeHighFreqFactor", r.high_freq_factor, "rope_scaling.high_freq_factor", "double");
  } else {
    g.define_real("kRopeBetaFast", r.beta_fast, "rope_scaling.beta_fast", "double");
    g.define_real("kRopeBetaSlow", r.beta_slow, "rope_scaling.beta_slow", "double");
    g.define_real("kRopeMscale", r.mscale, "rope_scaling.mscale", "double");
    g.define_real("kRopeMscaleAllDim", r.mscale_all_dim, "rope_scaling.mscale_all_dim", "double");
  }
}

void add_common_weights(const ModelSpec& s, Graph& g) {
  const int64_t H = s.hidden_size, V = s.vocab_size / s.ranks;
  g.weights.push_back({"embed_tokens", "embed_tokens", false, 0, 0, {V, H},
                       {{row_shard(s, "model.embed_tokens.weight", V, s.vocab_size, H)}}, "",
                       s.ranks > 1 ? "token embeddings: this rank's rows of the vocabulary" : "token embeddings"});
}

void add_final_weights(const ModelSpec& s, Graph& g) {
  const int64_t H = s.hidden_size, V = s.vocab_size / s.ranks;
  g.weights.push_back({"norm", "norm", false, 0, 0, {H}, {{{"model.norm.weight", 1}}}, "", "final RMSNorm"});
  WeightDecl lm{"lm_head", "lm_head", false, 0, 0, {V, H}, {{row_shard(s, "lm_head.weight", V, s.vocab_size, H)}}, "",
                s.ranks > 1 ? "LM head: this rank's rows of the vocabulary" : "LM head"};
  if (s.tie_word_embeddings) {
    lm.layouts.clear();  // tied: the LM head is the embedding matrix
    lm.tied_to = "embed_tokens";
    lm.comment = "LM head, tied to embed_tokens";
  }
  g.weights.push_back(lm);
}

void add_prologue_epilogue(const ModelSpec& s, Graph& g) {
  if (s.ranks == 1) {
    g.prologue.push_back(make_op(OpKind::embed, "embed_tokens",
                                 "x = embed_tokens[token_ids]   (x: fp32 residual stream [T, " + num(s.hidden_size) + "])",
                                 {{"table", "embed_tokens"}, {"x", "x"}}, {{"vocab", "kVocabSize"}, {"dim", "kHiddenSize"}},
                                 "embed_tokens"));
  } else {
    // Vocab-parallel embedding: each token's row comes from the one rank that holds it.
    g.prologue.push_back(make_op(OpKind::embed, "embed_tokens",
                                 "x = embed_tokens[token_ids]   (this rank's " + num(s.vocab_size / s.ranks) + " of " +
                                     num(s.vocab_size) + " rows; 0 for the other ranks' tokens)",
                                 {{"table", "embed_tokens"}, {"x", "x"}},
                                 {{"vocab", "kVocabShard"}, {"dim", "kHiddenSize"}}, "embed_tokens"));
    g.prologue.push_back(make_all_reduce(s, "x", "each token's row from the rank that holds it"));
  }
  Op norm = make_op(OpKind::rmsnorm_rows, "norm",
                    "h[r] = RMSNorm(x[logit_rows[r]]) · norm   (only the rows that need logits)",
                    {{"x", "x"}, {"weight", "norm"}, {"out", "h"}}, {{"dim", "kHiddenSize"}, {"eps", "kRmsNormEps"}},
                    "rmsnorm_rows_" + num(s.hidden_size));
  norm.rows = "N";
  g.epilogue.push_back(norm);
  if (s.ranks == 1) {
    g.epilogue.push_back(
        make_linear(g, "lm_head", "lm_head", "h", "logits", "kVocabSize", "kHiddenSize", LinearOut::store_f32, "", "N"));
    return;
  }
  // Vocab-parallel LM head: each rank scores its rows of the vocabulary, the gather lays them side by side.
  g.epilogue.push_back(make_linear(g, "lm_head", "lm_head", "h", "logits", "kVocabShard", "kHiddenSize",
                                   LinearOut::store_f32, "(this rank's tokens)", "N"));
  Op gather = make_op(OpKind::all_gather, "lm_head",
                      "logits[N, " + num(s.vocab_size) + "] = the " + num(s.ranks) +
                          " ranks' logits side by side   (all-gather)",
                      {{"logits", "logits"}}, {{"cols", "kVocabShard"}, {"ranks", "kRanks"}}, "all_gather_logits");
  gather.rows = "N";
  g.epilogue.push_back(gather);
}


namespace {

void build_dense(const ModelSpec& s, Graph& g) {
  // One rank's share with tensor parallelism (s.ranks > 1): whole attention heads (KV heads split,
  // or each replicated over kv_group ranks when there are fewer than ranks) and intermediate features.
  const int64_t t = s.ranks;
  const int64_t H = s.hidden_size, I = s.intermediate_size / t, D = s.head_dim;
  const int64_t Hq = s.num_attention_heads / t, Hkv = std::max<int64_t>(1, s.num_key_value_heads / t);
  const int64_t kv_group = t > s.num_key_value_heads ? t / s.num_key_value_heads : 1;
  const int64_t q_width = Hq * D, kv_width = Hkv * D, qkv_width = q_width + 2 * kv_width;
  const int64_t L = s.num_hidden_layers;

  define_common_constants(s, g);
  g.define("kNumHeads", Hq, per_rank(s, "num_attention_heads"));
  g.define("kNumKvHeads", Hkv,
           kv_group > 1 ? "one KV head of num_key_value_heads, shared by kRanks / num_key_value_heads ranks"
                        : per_rank(s, "num_key_value_heads"));
  g.define("kHeadDim", D, "head_dim");
  g.define("kIntermediateSize", I, per_rank(s, "intermediate_size"));
  g.define("kQWidth", q_width, "kNumHeads × kHeadDim");
  g.define("kKvWidth", kv_width, "kNumKvHeads × kHeadDim");
  g.define("kQkvWidth", qkv_width, "q | k | v: kQWidth + 2 × kKvWidth");
  g.define("kGateUpWidth", 2 * I, "gate | up: 2 × kIntermediateSize");
  g.define("kKvOffset", q_width, "k starts after q in a qkv row");
  g.define("kVOffset", q_width + kv_width, "v starts after q and k in a qkv row");
  g.define("kKvElemsPerToken", 2 * kv_width, "KV-cache values per token per layer: k and v");
  g.define_real("kAttnScale", 1.0 / std::sqrt(static_cast<double>(D)), "softmax scale 1/sqrt(head_dim)");
  define_decode_attention_constants(s, g, "kNumHeads", "kHeadDim");

  g.buffers = {
      {"x", Elem::f32, "kHiddenSize", "residual stream"},
      {"h", Elem::bf16, "kHiddenSize", "normalized hidden state"},
      {"qkv", Elem::bf16, "kQkvWidth",
       "q " + num(Hq) + "×" + num(D) + " | k " + num(Hkv) + "×" + num(D) + " | v " + num(Hkv) + "×" + num(D)},
      {"attn", Elem::bf16, "kQWidth", "attention output, " + num(Hq) + " heads × " + num(D)},
      {"gate_up", Elem::bf16, "kGateUpWidth", "gate " + num(I) + " | up " + num(I)},
      {"act", Elem::bf16, "kIntermediateSize", "silu(gate) ⊙ up"},
  };

  add_common_weights(s, g);
  auto layer_weight = [&](const std::string& field, std::vector<int64_t> shape, std::vector<WeightSource> sources,
                          const std::string& comment) {
    g.weights.push_back({field, "layers.{L}." + field, true, 0, L, std::move(shape), {std::move(sources)}, "", comment});
  };
  const int64_t q_whole = s.num_attention_heads * D, kv_whole = s.num_key_value_heads * D;
  layer_weight("input_layernorm", {H}, {{hf_layer("input_layernorm.weight"), 1}}, "RMSNorm before attention");
  layer_weight("qkv_proj", {qkv_width, H},
               {row_shard(s, hf_layer("self_attn.q_proj.weight"), q_width, q_whole, H),
                row_shard(s, hf_layer("self_attn.k_proj.weight"), kv_width, kv_whole, H, kv_group),
                row_shard(s, hf_layer("self_attn.v_proj.weight"), kv_width, kv_whole, H, kv_group)},
               t > 1 ? "q_proj | k_proj | v_proj rows of this rank's heads, fused" : "q_proj | k_proj | v_proj rows, fused");
  if (s.has_qk_norm()) {
    layer_weight("q_norm", {D}, {{hf_layer("self_attn.q_norm.weight"), 1}}, "per-head RMSNorm of q");
    layer_weight("k_norm", {D}, {{hf_layer("self_attn.k_norm.weight"), 1}}, "per-head RMSNorm of k");
  }
  layer_weight("o_proj", {H, q_width}, {column_shard(s, hf_layer("self_attn.o_proj.weight"), H, q_width, q_whole)},
               t > 1 ? "attention output projection: the columns of this rank's heads" : "attention output projection");
  layer_weight("post_attention_layernorm", {H}, {{hf_layer("post_attention_layernorm.weight"), 1}},
               "RMSNorm before the MLP");
  layer_weight("gate_up_proj", {2 * I, H},
               {row_shard(s, hf_layer("mlp.gate_proj.weight"), I, s.intermediate_size, H),
                row_shard(s, hf_layer("mlp.up_proj.weight"), I, s.intermediate_size, H)},
               t > 1 ? "gate_proj | up_proj rows of this rank's features, fused" : "gate_proj | up_proj rows, fused");
  layer_weight("down_proj", {H, I}, {column_shard(s, hf_layer("mlp.down_proj.weight"), H, I, s.intermediate_size)},
               t > 1 ? "MLP down projection: the columns of this rank's features" : "MLP down projection");
  add_final_weights(s, g);

  const std::string rank_note = t > 1 ? "   (this rank's share)" : "";
  std::vector<Op> attn;
  attn.push_back(make_rmsnorm(g, "input_layernorm", "x", "h", "kHiddenSize"));
  attn.push_back(make_linear(g, "self_attn.q_proj,k_proj,v_proj", "qkv_proj", "h", "qkv", "kQkvWidth", "kHiddenSize",
                             LinearOut::store_bf16,
                             "(q " + num(q_width) + " | k " + num(kv_width) + " | v " + num(kv_width) + ")" + rank_note));
  if (s.has_qk_norm()) {
    attn.push_back(make_op(
        OpKind::head_rmsnorm, "self_attn.q_norm,k_norm",
        "q[head] = RMSNorm(q[head]) · q_norm; k[head] = RMSNorm(k[head]) · k_norm   (per head of " + num(D) + ")",
        {{"qkv", "qkv"}, {"q_norm", "q_norm"}, {"k_norm", "k_norm"}},
        {{"heads", "kNumHeads"}, {"kv_heads", "kNumKvHeads"}, {"head_dim", "kHeadDim"}, {"row", "kQkvWidth"},
         {"eps", "kRmsNormEps"}},
        "head_rmsnorm"));
  }
  g.define("kNumQkHeads", Hq + Hkv, "q and k heads, rotated together: kNumHeads + kNumKvHeads");
  attn.push_back(make_rope("rotary_emb", "qkv",
                           "q, k = RoPE(q, k; positions)   (pairs (i, i + " + num(D / 2) + "), theta " +
                               fmt_real(s.rope.theta) +
                               (s.rope.type == RopeType::llama3 ? ", llama3 frequency scaling" : "") + ")",
                           "kNumQkHeads", "kHeadDim", "kHeadDim", "kQkvWidth", "0", false, "rope_qk"));
  attn.push_back(make_op(OpKind::kv_write, "past_key_values",
                         "k_cache[slot], v_cache[slot] = k, v   (" + num(Hkv) + " KV heads × " + num(D) +
                             ", pages of " + num(s.build.kv_page_size) + " tokens)",
                         {{"qkv", "qkv"}},
                         {{"kv_heads", "kNumKvHeads"}, {"head_dim", "kHeadDim"}, {"page_size", "kPageSize"},
                          {"row", "kQkvWidth"}, {"k_offset", "kKvOffset"}, {"v_offset", "kVOffset"}},
                         "kv_write"));
  attn.push_back(make_op(OpKind::attention, "self_attn",
                         "attn = softmax(q·kᵀ · " + fmt_real(1.0 / std::sqrt(static_cast<double>(D))) +
                             " + causal mask) · v   (" + num(Hq) + " query heads share " + num(Hkv) + " KV heads)",
                         {{"q", "qkv"}, {"out", "attn"}},
                         {{"heads", "kNumHeads"}, {"kv_heads", "kNumKvHeads"}, {"head_dim", "kHeadDim"},
                          {"page_size", "kPageSize"}, {"row", "kQkvWidth"}, {"scale", "kAttnScale"},
                          {"partition", "kAttnPartition"}, {"max_partitions", "kAttnMaxPartitions"}},
                         "attention"));
  add_residual_projection(s, g, attn, "self_attn.o_proj", "o_proj", "attn", "kQWidth");

  std::vector<Op> mlp;
  mlp.push_back(make_rmsnorm(g, "post_attention_layernorm", "x", "h", "kHiddenSize"));
  mlp.push_back(make_linear(g, "mlp.gate_proj,up_proj", "gate_up_proj", "h", "gate_up", "kGateUpWidth", "kHiddenSize",
                            LinearOut::store_bf16, "(gate " + num(I) + " | up " + num(I) + ")" + rank_note));
  mlp.push_back(make_silu_mul("mlp.act_fn", "gate_up", "act", "kIntermediateSize", g));
  add_residual_projection(s, g, mlp, "mlp.down_proj", "down_proj", "act", "kIntermediateSize");

  g.blocks.push_back({"decoder_layer", 0, L, {{"self-attention", attn}, {"MLP (SwiGLU)", mlp}}});
  add_prologue_epilogue(s, g);
}

}  // namespace

// What one batch-1 decode step reads of the bf16 weights: everything but the embedding (one row)
// and the routed experts (only the chosen ones; the runtime counts them per step).
void define_decode_bytes(const ModelSpec& s, Graph& g) {
  int64_t values = 0, expert_values = 0;
  for (const WeightDecl& w : g.weights) {
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    const int64_t layers = w.per_layer ? w.layer_last - w.layer_first : 1;
    if (w.experts > 0) {
      expert_values += n / w.experts;  // one expert of this tensor, in one layer
    } else if (w.field == "embed_tokens") {
      values += s.hidden_size;
    } else if (!w.tied_to.empty()) {
      values += n;  // the tied LM head reads the whole embedding matrix
    } else {
      values += n * layers;
    }
  }
  g.define("kDecodeWeightBytes", 2 * values, "bf16 weight bytes a batch-1 decode step reads, routed experts aside");
  g.define("kRoutedExpertBytes", 2 * expert_values, "bf16 bytes of one routed expert (gate | up and down)");
}

Graph build_graph(const ModelSpec& spec) {
  Graph g;
  if (spec.family == Family::deepseek_v2) {
    build_deepseek(spec, g);
  } else {
    build_dense(spec, g);
  }
  g.decode_gemm_past_pass = spec.ranks == 1 && spec.build.max_batch > kGemvPassTokens;
  bind_warm_weights(g);
  fuse(g);
  check_bindings(g);
  mark_matrix_weights(g);
  share_kernels(g);
  define_decode_bytes(spec, g);
  define_decode_scratch(spec, g);
  if (decode_step_ops(spec, g)) define_decode_step_constants(spec, g);
  // Kernel wrappers and buffers share the generated forward's scope: one name, one thing.
  for (const Op* op : g.all_ops()) {
    for (const Buffer& b : g.buffers) {
      if (op->kernel == b.name || op->kernel + "_prefill" == b.name || op->kernel + "_decode" == b.name) {
        fail("internal: kernel wrapper ", op->kernel, " has the name of a buffer");
      }
    }
  }
  return g;
}

}  // namespace kiln::codegen
