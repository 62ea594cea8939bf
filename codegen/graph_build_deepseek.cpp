// ModelSpec -> Graph for DeepSeek-V2: MLA attention over a compressed, paged latent cache with the
// key/value up-projections absorbed, and DeepSeekMoE (dense MLP in the first layers).
//
// MLA, per token: the KV cache holds only c_kv = RMSNorm(kv_a[:kv_lora]) and the shared k_rope
// (kv_lora + rope values per layer). Scores are q_nope·k_nope + q_rope·k_rope with
// k_nope = W_UK·c_kv, so q_nope is folded into the latent space once per token
// (q_latent = W_UKᵀ·q_nope) and attention runs MQA-like over the latent cache; its output
// o_latent = Σ p·c_kv is lifted to the heads' value space by W_UV. W_UK and W_UV are kv_b_proj's
// rows, split per head at load.
//
// Tensor parallelism (s.ranks = t > 1): a rank holds num_attention_heads / t query heads (their
// rows of q_b_proj / q_proj and kv_b_proj, their columns of o_proj) over the whole latent cache
// (c_kv and k_rope are shared by every head, so each rank computes and keeps all of it), 1/t of the
// dense and shared experts' intermediate features, and n_routed_experts / t routed experts whole
// (expert parallelism: every rank has every token after the all-reduce, routes it over all experts
// and runs the chosen ones it holds; the MoE block's all-reduce then sums the experts' outputs
// with the shared experts' shares).
#include <cmath>

#include "codegen/graph_build.hpp"
#include "runtime/core/error.hpp"

namespace kiln::codegen {

namespace {

// YaRN's softmax-scale correction (HF yarn_get_mscale with mscale_all_dim), squared.
double yarn_scale_factor(const RopeSpec& r) {
  if (r.type != RopeType::yarn || r.mscale_all_dim == 0 || r.factor <= 1) return 1.0;
  const double m = 0.1 * r.mscale_all_dim * std::log(r.factor) + 1.0;
  return m * m;
}

// Whether the GPU prefill expands K and V from the latent cache (templates/mla_attention_expanded.cuh):
// when a full prefill chunk of new tokens pays for expanding even over the longest cached context,
// that is when max_batched_tokens passes latent·(nope + v) / (2·latent - nope - v) (DeepSeek-V2:
// about 171). A fresh prompt pays at any length; decode stays absorbed.
bool prefill_expands(const ModelSpec& s) {
  const MlaSpec& a = *s.mla;
  const int64_t saved_per_pair = 2 * a.kv_lora_rank - a.qk_nope_head_dim - a.v_head_dim;
  const int64_t per_key = a.kv_lora_rank * (a.qk_nope_head_dim + a.v_head_dim);
  return saved_per_pair > 0 && s.build.max_batched_tokens * saved_per_pair > per_key;
}

void define_constants(const ModelSpec& s, Graph& g) {
  const MlaSpec& a = *s.mla;
  const MoeSpec& m = *s.moe;
  const int64_t t = s.ranks, H = s.num_attention_heads / t;
  define_common_constants(s, g);
  g.define("kNumHeads", H, per_rank(s, "num_attention_heads"));
  if (a.q_lora_rank) g.define("kQLoraRank", a.q_lora_rank, "q_lora_rank");
  g.define("kKvLoraRank", a.kv_lora_rank, "kv_lora_rank: the latent c_kv");
  g.define("kQkNopeHeadDim", a.qk_nope_head_dim, "qk_nope_head_dim");
  g.define("kQkRopeHeadDim", a.qk_rope_head_dim, "qk_rope_head_dim");
  g.define("kVHeadDim", a.v_head_dim, "v_head_dim");
  g.define("kQkHeadDim", a.qk_nope_head_dim + a.qk_rope_head_dim, "kQkNopeHeadDim + kQkRopeHeadDim");
  g.define("kQWidth", H * (a.qk_nope_head_dim + a.qk_rope_head_dim), "kNumHeads × kQkHeadDim");
  g.define("kKvAWidth", a.kv_lora_rank + a.qk_rope_head_dim, "kv_a_proj_with_mqa rows: c_kv | k_rope");
  g.define("kKvElemsPerToken", a.kv_lora_rank + a.qk_rope_head_dim, "latent cache values per token per layer");
  g.define("kKRopeHeads", 1, "k_rope is one head, shared by all query heads");
  g.define("kMlaQueryWidth", H * (a.kv_lora_rank + a.qk_rope_head_dim), "kNumHeads × (kKvLoraRank + kQkRopeHeadDim)");
  g.define("kLatentOutWidth", H * a.kv_lora_rank, "kNumHeads × kKvLoraRank");
  g.define("kAttnOutWidth", H * a.v_head_dim, "kNumHeads × kVHeadDim");
  g.define("kIntermediateSize", s.intermediate_size / t, per_rank(s, "intermediate_size") + " (dense layers)");
  g.define("kGateUpWidth", 2 * s.intermediate_size / t, "gate | up: 2 × kIntermediateSize");
  g.define("kFirstKDenseReplace", m.first_k_dense_replace, "first_k_dense_replace: layers with a dense MLP");
  g.define("kNumExperts", m.n_routed_experts, "n_routed_experts");
  if (t > 1) g.define("kLocalExperts", m.n_routed_experts / t, "n_routed_experts / kRanks: the routed experts this rank holds");
  g.define("kNumExpertsPerTok", m.num_experts_per_tok, "num_experts_per_tok");
  g.define("kMoeIntermediateSize", m.moe_intermediate_size, "moe_intermediate_size");
  g.define("kMoeGateUpWidth", 2 * m.moe_intermediate_size, "an expert's gate | up: 2 × kMoeIntermediateSize");
  g.define("kMoeTokenGateUpWidth", m.num_experts_per_tok * 2 * m.moe_intermediate_size,
           "one token's chosen experts' gate | up");
  g.define("kMoeTokenActWidth", m.num_experts_per_tok * m.moe_intermediate_size, "one token's chosen experts' act");
  g.define("kMoeTokenDownWidth", m.num_experts_per_tok * s.hidden_size,
           "one token's chosen experts' down projections (bf16, prefill)");
  g.define("kMoeScratchPerToken", m.num_experts_per_tok + m.n_routed_experts / t + 1,
           "int scratch: (token, expert) pairs bucketed by expert, and bucket offsets");
  if (m.n_shared_experts > 0) {
    const int64_t shared = m.n_shared_experts * m.moe_intermediate_size / t;
    g.define("kSharedIntermediateSize", shared,
             t > 1 ? "shared experts, one MLP: n_shared_experts × moe_intermediate_size / kRanks"
                   : "shared experts, one MLP: n_shared_experts × moe_intermediate_size");
    g.define("kSharedGateUpWidth", 2 * shared, "2 × kSharedIntermediateSize");
  }
  g.define("kNumGroups", m.n_group, "n_group");
  g.define("kTopkGroups", m.topk_group, "topk_group");
  g.define_real("kRoutedScalingFactor", m.routed_scaling_factor, "routed_scaling_factor");
  const double scale = yarn_scale_factor(s.rope) / std::sqrt(static_cast<double>(a.qk_nope_head_dim + a.qk_rope_head_dim));
  g.define_real("kAttnScale", scale, "softmax scale: kQkHeadDim^-0.5 × yarn mscale(factor, mscale_all_dim)²");
  define_decode_attention_constants(s, g, "kNumHeads", "kKvLoraRank");
  if (prefill_expands(s)) {
    g.define("kMlaExpandedKeys", (s.build.max_context + 7) / 8 * 8,
             "max_context in multiples of 8: the keys the prefill expands at once (any one sequence's)");
    g.define("kMlaExpandedValuesPerKey", a.kv_lora_rank + a.qk_rope_head_dim + H * (a.qk_nope_head_dim + a.v_head_dim),
             "an expanded key's c_kv | k_rope | k_nope of every head | v of every head");
  }
}

// One rank's heads of kv_b_proj: `rows` of each of its heads' rows (W_UK's nope rows or W_UV's
// value rows, `row_begin` into the head), heads of kv_b_stride rows.
WeightSource head_rows(const ModelSpec& s, const std::string& name, int64_t rows, int64_t row_begin) {
  const MlaSpec& a = *s.mla;
  const int64_t heads = s.num_attention_heads / s.ranks, stride = a.qk_nope_head_dim + a.v_head_dim;
  WeightSource w{name, rows, row_begin, heads, stride};
  if (s.ranks == 1) return w;
  w.rank_rows = heads * stride;
  w.hf_rows = s.num_attention_heads * stride;
  w.hf_cols = a.kv_lora_rank;
  return w;
}

// A routed expert's tensor in a per-expert layout ({E}): with expert parallelism, this rank's experts.
WeightSource expert_source(const ModelSpec& s, const std::string& name, int64_t rows) {
  WeightSource w{name, rows};
  if (s.ranks > 1) w.rank_experts = s.moe->n_routed_experts / s.ranks;
  return w;
}

void add_weights(const ModelSpec& s, Graph& g) {
  const MlaSpec& a = *s.mla;
  const MoeSpec& m = *s.moe;
  const int64_t t = s.ranks;
  const int64_t H = s.hidden_size, Hn = s.num_attention_heads / t, L = s.num_hidden_layers, K = m.first_k_dense_replace;
  const int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
  const int64_t E = m.n_routed_experts / t, Im = m.moe_intermediate_size, Is = m.n_shared_experts * Im / t;
  const int64_t I = s.intermediate_size / t;
  const std::string heads = t > 1 ? " of this rank's heads" : "";
  const std::string each_head = t > 1 ? "each of this rank's heads" : "each head";
  auto layers = [&](const std::string& field, int64_t first, int64_t last, std::vector<int64_t> shape,
                    std::vector<std::vector<WeightSource>> layouts, const std::string& comment, int64_t experts = 0) {
    g.weights.push_back(
        {field, "layers.{L}." + field, true, first, last, std::move(shape), std::move(layouts), "", comment, experts});
  };
  add_common_weights(s, g);
  layers("input_layernorm", 0, L, {H}, {{{hf_layer("input_layernorm.weight"), 1}}}, "RMSNorm before attention");
  if (a.q_lora_rank) {
    layers("q_a_proj", 0, L, {a.q_lora_rank, H}, {{{hf_layer("self_attn.q_a_proj.weight"), a.q_lora_rank}}},
           "q down-projection");
    layers("q_a_layernorm", 0, L, {a.q_lora_rank}, {{{hf_layer("self_attn.q_a_layernorm.weight"), 1}}},
           "RMSNorm of the q latent");
    layers("q_b_proj", 0, L, {Hn * qk, a.q_lora_rank},
           {{row_shard(s, hf_layer("self_attn.q_b_proj.weight"), Hn * qk, Hn * t * qk, a.q_lora_rank)}},
           "q up-projection: per head nope | rope" + heads);
  } else {
    layers("q_proj", 0, L, {Hn * qk, H}, {{row_shard(s, hf_layer("self_attn.q_proj.weight"), Hn * qk, Hn * t * qk, H)}},
           "q projection: per head nope | rope" + heads);
  }
  layers("kv_a_proj_with_mqa", 0, L, {a.kv_lora_rank + a.qk_rope_head_dim, H},
         {{{hf_layer("self_attn.kv_a_proj_with_mqa.weight"), a.kv_lora_rank + a.qk_rope_head_dim}}},
         "kv down-projection: c_kv | k_rope");
  layers("kv_a_layernorm", 0, L, {a.kv_lora_rank}, {{{hf_layer("self_attn.kv_a_layernorm.weight"), 1}}},
         "RMSNorm of c_kv");
  layers("w_uk", 0, L, {Hn * a.qk_nope_head_dim, a.kv_lora_rank},
         {{head_rows(s, hf_layer("self_attn.kv_b_proj.weight"), a.qk_nope_head_dim, 0)}},
         "W_UK: kv_b_proj's k_nope rows of " + each_head + " [heads × nope, kv_lora]");
  layers("w_uv", 0, L, {Hn * a.v_head_dim, a.kv_lora_rank},
         {{head_rows(s, hf_layer("self_attn.kv_b_proj.weight"), a.v_head_dim, a.qk_nope_head_dim)}},
         "W_UV: kv_b_proj's value rows of " + each_head + " [heads × v, kv_lora]");
  layers("o_proj", 0, L, {H, Hn * a.v_head_dim},
         {{column_shard(s, hf_layer("self_attn.o_proj.weight"), H, Hn * a.v_head_dim, Hn * t * a.v_head_dim)}},
         t > 1 ? "attention output projection: the columns of this rank's heads" : "attention output projection");
  layers("post_attention_layernorm", 0, L, {H}, {{{hf_layer("post_attention_layernorm.weight"), 1}}},
         "RMSNorm before the MLP / MoE");
  if (K > 0) {
    layers("gate_up_proj", 0, K, {2 * I, H},
           {{row_shard(s, hf_layer("mlp.gate_proj.weight"), I, s.intermediate_size, H),
             row_shard(s, hf_layer("mlp.up_proj.weight"), I, s.intermediate_size, H)}},
           t > 1 ? "dense MLP gate_proj | up_proj rows of this rank's features, fused" : "dense MLP gate_proj | up_proj rows, fused");
    layers("down_proj", 0, K, {H, I}, {{column_shard(s, hf_layer("mlp.down_proj.weight"), H, I, s.intermediate_size)}},
           t > 1 ? "dense MLP down projection: the columns of this rank's features" : "dense MLP down projection");
  }
  if (K < L) {
    layers("router", K, L, {m.n_routed_experts, H}, {{{hf_layer("mlp.gate.weight"), m.n_routed_experts}}},
           "router: one row per routed expert");
    // Routed experts: per-expert tensors (the published checkpoints) or the fused tensors
    // transformers 5 saves; gate rows before up rows either way.
    const std::string which = t > 1 ? "this rank's routed experts'" : "routed experts'";
    layers("experts_gate_up", K, L, {E, 2 * Im, H},
           {{expert_source(s, hf_layer("mlp.experts.{E}.gate_proj.weight"), Im),
             expert_source(s, hf_layer("mlp.experts.{E}.up_proj.weight"), Im)},
            {row_shard(s, hf_layer("mlp.experts.gate_up_proj"), E * 2 * Im, E * t * 2 * Im, H)}},
           which + " gate_proj | up_proj rows [experts, 2 × moe_intermediate, hidden]", E);
    layers("experts_down", K, L, {E, H, Im},
           {{expert_source(s, hf_layer("mlp.experts.{E}.down_proj.weight"), H)},
            {row_shard(s, hf_layer("mlp.experts.down_proj"), E * H, E * t * H, Im)}},
           which + " down_proj [experts, hidden, moe_intermediate]", E);
    if (Is > 0) {
      const int64_t whole = m.n_shared_experts * Im;
      layers("shared_gate_up", K, L, {2 * Is, H},
             {{row_shard(s, hf_layer("mlp.shared_experts.gate_proj.weight"), Is, whole, H),
               row_shard(s, hf_layer("mlp.shared_experts.up_proj.weight"), Is, whole, H)}},
             t > 1 ? "shared experts' gate_proj | up_proj rows of this rank's features, fused"
                   : "shared experts' gate_proj | up_proj rows, fused");
      layers("shared_down", K, L, {H, Is}, {{column_shard(s, hf_layer("mlp.shared_experts.down_proj.weight"), H, Is, whole)}},
             t > 1 ? "shared experts' down projection: the columns of this rank's features"
                   : "shared experts' down projection");
    }
  }
  add_final_weights(s, g);
}

std::vector<Op> attention_ops(const ModelSpec& s, const Graph& g) {
  const MlaSpec& a = *s.mla;
  const int64_t Hn = s.num_attention_heads / s.ranks;  // this rank's heads
  std::vector<Op> ops;
  ops.push_back(make_rmsnorm(g, "input_layernorm", "x", "h", "kHiddenSize"));
  ops.push_back(make_linear(g, "self_attn.kv_a_proj_with_mqa", "kv_a_proj_with_mqa", "h", "kv_a", "kKvAWidth",
                            "kHiddenSize", LinearOut::store_bf16,
                            "(c_kv " + num(a.kv_lora_rank) + " | k_rope " + num(a.qk_rope_head_dim) + ")"));
  // One GPU: the latent's projection runs beside the query's (a second stream at small decode
  // batches and at prefill: each alone leaves the GPU partly idle at its start and end); the RoPE
  // waits for both.
  ops.back().beside = s.ranks == 1;
  if (a.q_lora_rank) {
    ops.push_back(make_linear(g, "self_attn.q_a_proj", "q_a_proj", "h", "q_a", "kQLoraRank", "kHiddenSize",
                              LinearOut::store_bf16, ""));
    ops.push_back(make_op(OpKind::rmsnorm_inplace, "self_attn.q_a_layernorm",
                          "q_a = RMSNorm(q_a) · q_a_layernorm   (" + num(a.q_lora_rank) + " features)",
                          {{"rows", "q_a"}, {"weight", "q_a_layernorm"}},
                          {{"dim", "kQLoraRank"}, {"row", "kQLoraRank"}, {"eps", "kRmsNormEps"}}, "rmsnorm_q_latent"));
    ops.push_back(make_linear(g, "self_attn.q_b_proj", "q_b_proj", "q_a", "q", "kQWidth", "kQLoraRank",
                              LinearOut::store_bf16, "(per head: nope " + num(a.qk_nope_head_dim) + " | rope " +
                                                         num(a.qk_rope_head_dim) + ")"));
  } else {
    ops.push_back(make_linear(g, "self_attn.q_proj", "q_proj", "h", "q", "kQWidth", "kHiddenSize",
                              LinearOut::store_bf16,
                              "(per head: nope " + num(a.qk_nope_head_dim) + " | rope " + num(a.qk_rope_head_dim) + ")"));
  }
  ops.push_back(make_op(OpKind::rmsnorm_inplace, "self_attn.kv_a_layernorm",
                        "c_kv = RMSNorm(kv_a[:, :" + num(a.kv_lora_rank) + "]) · kv_a_layernorm   (in place)",
                        {{"rows", "kv_a"}, {"weight", "kv_a_layernorm"}},
                        {{"dim", "kKvLoraRank"}, {"row", "kKvAWidth"}, {"eps", "kRmsNormEps"}}, "rmsnorm_kv_latent"));
  const std::string theta = fmt_real(s.rope.theta) + (s.rope.type == RopeType::yarn ? ", YaRN scaling" : "");
  ops.push_back(make_rope("rotary_emb (q)", "q",
                          "q_rope = RoPE(q[:, head, " + num(a.qk_nope_head_dim) + ":]; positions)   (interleaved pairs, " +
                              num(Hn) + " heads, theta " + theta + ")",
                          "kNumHeads", "kQkHeadDim", "kQkRopeHeadDim", "kQWidth", "kQkNopeHeadDim", true, "rope_q"));
  ops.push_back(make_rope("rotary_emb (k)", "kv_a",
                          "k_rope = RoPE(kv_a[:, " + num(a.kv_lora_rank) + ":]; positions)   (one head shared by all)",
                          "kKRopeHeads", "kKvAWidth", "kQkRopeHeadDim", "kKvAWidth", "kKvLoraRank", true, "rope_k"));
  ops.push_back(make_op(OpKind::mla_kv_write, "past_key_values",
                        "latent_cache[slot] = c_kv | k_rope   (" + num(a.kv_lora_rank + a.qk_rope_head_dim) +
                            " values per token, pages of " + num(s.build.kv_page_size) + ")",
                        {{"kv_a", "kv_a"}}, {{"latent", "kKvLoraRank"}, {"rope", "kQkRopeHeadDim"}, {"page_size", "kPageSize"}},
                        "mla_kv_write"));
  std::vector<Op> core;  // the attention proper: absorbed, or expanded at prefill
  core.push_back(make_op(OpKind::mla_q_absorb, "self_attn (absorbed W_UK)",
                         "q_mla[head] = W_UK[head]ᵀ · q_nope[head] | q_rope[head]   (" + num(a.qk_nope_head_dim) +
                             " -> " + num(a.kv_lora_rank) + " per head)",
                         {{"q", "q"}, {"w_uk", "w_uk"}, {"q_mla", "q_mla"}},
                         {{"heads", "kNumHeads"}, {"nope", "kQkNopeHeadDim"}, {"rope", "kQkRopeHeadDim"}, {"latent", "kKvLoraRank"}},
                         "mla_q_absorb"));
  core.push_back(make_op(OpKind::mla_attention, "self_attn",
                         "o_latent = softmax((q_latent·c_kv + q_rope·k_rope) · " +
                             fmt_real(g.constant("kAttnScale").real_value) + " + causal mask) · c_kv   (" + num(Hn) +
                             " heads over one latent head)",
                         {{"q_mla", "q_mla"}, {"o_lat", "o_lat"}},
                         {{"heads", "kNumHeads"}, {"latent", "kKvLoraRank"}, {"rope", "kQkRopeHeadDim"},
                          {"page_size", "kPageSize"}, {"scale", "kAttnScale"}, {"partition", "kAttnPartition"},
                          {"max_partitions", "kAttnMaxPartitions"}},
                         "mla_attention"));
  core.push_back(make_op(OpKind::mla_v_up, "self_attn (absorbed W_UV)",
                         "attn[head] = W_UV[head] · o_latent[head]   (" + num(a.kv_lora_rank) + " -> " +
                             num(a.v_head_dim) + " per head)",
                         {{"o_lat", "o_lat"}, {"w_uv", "w_uv"}, {"out", "attn"}},
                         {{"heads", "kNumHeads"}, {"latent", "kKvLoraRank"}, {"v", "kVHeadDim"}}, "mla_v_up"));
  if (prefill_expands(s)) {
    Op expanded = make_op(
        OpKind::mla_attention_expanded, "self_attn",
        "attn[head] = softmax((q_nope·k_nope + q_rope·k_rope) · " + fmt_real(g.constant("kAttnScale").real_value) +
            " + causal mask) · v   (k_nope = W_UK[head]·c_kv, v = W_UV[head]·c_kv: the prefill step's keys expanded "
            "from the latent cache, " + num(Hn) + " heads of " + num(a.qk_nope_head_dim + a.qk_rope_head_dim) + " / " +
            num(a.v_head_dim) + ")",
        {{"q", "q"}, {"w_uk", "w_uk"}, {"w_uv", "w_uv"}, {"out", "attn"}},
        {{"heads", "kNumHeads"}, {"nope", "kQkNopeHeadDim"}, {"rope", "kQkRopeHeadDim"}, {"latent", "kKvLoraRank"},
         {"v", "kVHeadDim"}, {"page_size", "kPageSize"}, {"scale", "kAttnScale"}, {"keys", "kMlaExpandedKeys"}},
        "mla_attention_expanded");
    expanded.parts = std::move(core);
    ops.push_back(std::move(expanded));
  } else {
    ops.insert(ops.end(), core.begin(), core.end());
  }
  add_residual_projection(s, g, ops, "self_attn.o_proj", "o_proj", "attn", "kAttnOutWidth");
  return ops;
}

std::vector<Op> dense_mlp_ops(const ModelSpec& s, const Graph& g) {
  std::vector<Op> ops;
  ops.push_back(make_rmsnorm(g, "post_attention_layernorm", "x", "h", "kHiddenSize"));
  ops.push_back(make_linear(g, "mlp.gate_proj,up_proj", "gate_up_proj", "h", "gate_up", "kGateUpWidth", "kHiddenSize",
                            LinearOut::store_bf16, ""));
  ops.push_back(make_silu_mul("mlp.act_fn", "gate_up", "act", "kIntermediateSize", g));
  add_residual_projection(s, g, ops, "mlp.down_proj", "down_proj", "act", "kIntermediateSize");
  return ops;
}

// The shared experts: one SwiGLU MLP; with tensor parallelism each rank's features, its share
// stored in x on every rank but 0 (the routed experts then add theirs, and one all-reduce sums all).
void add_shared_gate_up_act(const Graph& g, std::vector<Op>& ops, bool beside) {
  ops.push_back(make_linear(g, "mlp.shared_experts.gate_proj,up_proj", "shared_gate_up", "h", "shared_gate_up",
                            "kSharedGateUpWidth", "kHiddenSize", LinearOut::store_bf16, ""));
  ops.push_back(make_silu_mul("mlp.shared_experts.act_fn", "shared_gate_up", "shared_act", "kSharedIntermediateSize", g));
  ops[ops.size() - 2].beside = ops.back().beside = beside;
}
void add_shared_down(const ModelSpec& s, const Graph& g, std::vector<Op>& ops) {
  add_residual_projection(s, g, ops, "mlp.shared_experts.down_proj", "shared_down", "shared_act", "kSharedIntermediateSize",
                          false);
}

std::vector<Op> moe_ops(const ModelSpec& s, const Graph& g) {
  const MoeSpec& m = *s.moe;
  const bool split = s.ranks > 1;
  std::vector<Op> ops;
  ops.push_back(make_rmsnorm(g, "post_attention_layernorm", "x", "h", "kHiddenSize"));
  // One GPU: the shared experts run beside the routing and the routed experts (a second stream at
  // small decode batches and at prefill: each op alone leaves the GPU partly idle at its start and
  // end, and at prefill the routed experts stream from DRAM while these multiply), their down
  // projection into shared_out (fp32), which the routed experts' sum adds to x after its own: the
  // same two fp32 additions, in the same order, as when shared_down added into x after it.
  const bool shared = m.n_shared_experts > 0;
  if (!split && shared) {
    add_shared_gate_up_act(g, ops, true);
    ops.push_back(make_linear(g, "mlp.shared_experts.down_proj", "shared_down", "shared_act", "shared_out", "kHiddenSize",
                              "kSharedIntermediateSize", LinearOut::store_f32, "(added by the routed experts' sum)"));
    ops.back().beside = true;
  }
  ops.push_back(make_linear(g, "mlp.gate", "router", "h", "router_logits", "kNumExperts", "kHiddenSize",
                            LinearOut::store_f32, ""));
  std::string how = m.topk_method == TopkMethod::greedy
                        ? "top " + num(m.num_experts_per_tok) + " of " + num(m.n_routed_experts)
                        : "top " + num(m.num_experts_per_tok) + " within the best " + num(m.topk_group) + " of " +
                              num(m.n_group) + " groups";
  const bool normalize = m.norm_topk_prob && m.num_experts_per_tok > 1;
  how += normalize ? ", weights renormalized" : ", weights × " + fmt_real(m.routed_scaling_factor);
  if (split) how += "; ids of this rank's " + num(m.n_routed_experts / s.ranks) + " experts, -1 for the others'";
  const std::string local = split ? "kLocalExperts" : "kNumExperts";
  ops.push_back(make_op(OpKind::moe_route, "mlp.gate (routing)",
                        "experts, weights = route(softmax(router_logits))   (" + how + ")",
                        {{"logits", "router_logits"}, {"ids", "topk_ids"}, {"weights", "topk_weights"}},
                        {{"experts", "kNumExperts"}, {"top_k", "kNumExpertsPerTok"}, {"groups", "kNumGroups"},
                         {"topk_groups", "kTopkGroups"},
                         {"group_limited", m.topk_method == TopkMethod::group_limited_greedy ? "true" : "false"},
                         {"normalize", normalize ? "true" : "false"}, {"scaling", "kRoutedScalingFactor"},
                         {"local_experts", local}},
                        "moe_route"));
  // Tensor parallelism: the shared experts first, so that every rank but 0 stores its share in x.
  if (split) {
    add_shared_gate_up_act(g, ops, false);
    add_shared_down(s, g, ops);
  }
  const std::map<std::string, std::string> experts = {{"experts", local}, {"top_k", "kNumExpertsPerTok"},
                                                      {"hidden", "kHiddenSize"}, {"inter", "kMoeIntermediateSize"},
                                                      {"sms", "kTargetSms"}};
  const std::string read = split ? "(only the chosen experts this rank holds are read)" : "(only the chosen experts' weights are read)";
  ops.push_back(make_op(OpKind::moe_gate_up, "mlp.experts (gate_up_proj)",
                        "moe_gate_up[t, j] = h[t] · experts_gate_up[experts[t, j]]ᵀ   " + read,
                        {{"h", "h"}, {"weight", "experts_gate_up"}, {"ids", "topk_ids"}, {"out", "moe_gate_up"},
                         {"scratch", "moe_scratch"}},
                        experts, "moe_experts_gate_up"));
  ops.push_back(make_silu_mul("mlp.experts (act_fn)", "moe_gate_up", "moe_act", "kMoeIntermediateSize", g,
                              "kNumExpertsPerTok"));
  std::map<std::string, std::string> down_args = {{"act", "moe_act"},       {"weight", "experts_down"},
                                                  {"ids", "topk_ids"},      {"weights", "topk_weights"},
                                                  {"scratch", "moe_scratch"}, {"pairs", "moe_pairs"},
                                                  {"x", "x"}};
  std::string down_math = "x += Σ_j weights[t, j] · experts_down[experts[t, j]] · moe_act[t, j]";
  if (!split && shared) {
    down_args["shared"] = "shared_out";
    down_math += ", then x += shared_out";
  }
  ops.push_back(make_op(OpKind::moe_down, "mlp.experts (down_proj)",
                        down_math + "   (residual add fused" + std::string(split ? "; this rank's experts" : "") + ")",
                        down_args, experts, "moe_experts_down"));
  if (split) ops.push_back(make_all_reduce(s, "x", "rank 0's x holds the residual; each rank's experts and shared share"));
  return ops;
}

}  // namespace

void build_deepseek(const ModelSpec& s, Graph& g) {
  const MlaSpec& a = *s.mla;
  const MoeSpec& m = *s.moe;
  define_constants(s, g);
  g.latent_kv = true;
  g.buffers = {
      {"x", Elem::f32, "kHiddenSize", "residual stream"},
      {"h", Elem::bf16, "kHiddenSize", "normalized hidden state"},
      {"q", Elem::bf16, "kQWidth", "q, per head nope | rope"},
      {"kv_a", Elem::bf16, "kKvAWidth", "c_kv | k_rope"},
      {"q_mla", Elem::bf16, "kMlaQueryWidth", "per head q_latent | q_rope"},
      {"o_lat", Elem::bf16, "kLatentOutWidth", "attention output in the latent space, per head"},
      {"attn", Elem::bf16, "kAttnOutWidth", "attention output, per head"},
  };
  if (a.q_lora_rank) g.buffers.push_back({"q_a", Elem::bf16, "kQLoraRank", "q latent"});
  if (m.first_k_dense_replace > 0) {
    g.buffers.push_back({"gate_up", Elem::bf16, "kGateUpWidth", "dense MLP gate | up"});
    g.buffers.push_back({"act", Elem::bf16, "kIntermediateSize", "dense MLP silu(gate) ⊙ up"});
  }
  if (m.first_k_dense_replace < s.num_hidden_layers) {
    g.buffers.push_back({"router_logits", Elem::f32, "kNumExperts", "router logits"});
    g.buffers.push_back({"topk_ids", Elem::i32, "kNumExpertsPerTok", "chosen experts"});
    g.buffers.push_back({"topk_weights", Elem::f32, "kNumExpertsPerTok", "their weights"});
    g.buffers.push_back({"moe_gate_up", Elem::bf16, "kMoeTokenGateUpWidth", "chosen experts' gate | up"});
    g.buffers.push_back({"moe_act", Elem::bf16, "kMoeTokenActWidth", "chosen experts' silu(gate) ⊙ up"});
    g.buffers.push_back({"moe_scratch", Elem::i32, "kMoeScratchPerToken", "routing scratch"});
    // Each pair's output apart, weighted and summed per token in slot order (deterministic).
    g.buffers.push_back({"moe_pairs", Elem::bf16, "kMoeTokenDownWidth", "chosen experts' down projections"});
    if (m.n_shared_experts > 0) {
      g.buffers.push_back({"shared_gate_up", Elem::bf16, "kSharedGateUpWidth", "shared experts' gate | up"});
      g.buffers.push_back({"shared_act", Elem::bf16, "kSharedIntermediateSize", "shared experts' silu(gate) ⊙ up"});
      if (s.ranks == 1) g.buffers.push_back({"shared_out", Elem::f32, "kHiddenSize", "shared experts' output"});
    }
  }
  add_weights(s, g);

  const std::vector<Op> attention = attention_ops(s, g);
  if (m.first_k_dense_replace > 0) {
    g.blocks.push_back({"decoder_layer (dense MLP)", 0, m.first_k_dense_replace,
                        {{"self-attention (MLA)", attention}, {"MLP (SwiGLU)", dense_mlp_ops(s, g)}}});
  }
  if (m.first_k_dense_replace < s.num_hidden_layers) {
    g.blocks.push_back({"decoder_layer (DeepSeekMoE)", m.first_k_dense_replace, s.num_hidden_layers,
                        {{"self-attention (MLA)", attention}, {"DeepSeekMoE: routed experts + shared experts", moe_ops(s, g)}}});
  }
  add_prologue_epilogue(s, g);
}

}  // namespace kiln::codegen
