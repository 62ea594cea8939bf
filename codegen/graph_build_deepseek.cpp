// ModelSpec -> Graph for DeepSeek-V2: MLA attention over a compressed, paged latent cache with the
// key/value up-projections absorbed, and DeepSeekMoE (dense MLP in the first layers).
//
// MLA, per token: the KV cache holds only c_kv = RMSNorm(kv_a[:kv_lora]) and the shared k_rope
// (kv_lora + rope values per layer). Scores are q_nope·k_nope + q_rope·k_rope with
// k_nope = W_UK·c_kv, so q_nope is folded into the latent space once per token
// (q_latent = W_UKᵀ·q_nope) and attention runs MQA-like over the latent cache; its output
// o_latent = Σ p·c_kv is lifted to the heads' value space by W_UV. W_UK and W_UV are kv_b_proj's
// rows, split per head at load.
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

void define_constants(const ModelSpec& s, Graph& g) {
  const MlaSpec& a = *s.mla;
  const MoeSpec& m = *s.moe;
  const int64_t H = s.num_attention_heads;
  define_common_constants(s, g);
  g.define("kNumHeads", H, "num_attention_heads");
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
  g.define("kIntermediateSize", s.intermediate_size, "intermediate_size (dense layers)");
  g.define("kGateUpWidth", 2 * s.intermediate_size, "gate | up: 2 × kIntermediateSize");
  g.define("kFirstKDenseReplace", m.first_k_dense_replace, "first_k_dense_replace: layers with a dense MLP");
  g.define("kNumExperts", m.n_routed_experts, "n_routed_experts");
  g.define("kNumExpertsPerTok", m.num_experts_per_tok, "num_experts_per_tok");
  g.define("kMoeIntermediateSize", m.moe_intermediate_size, "moe_intermediate_size");
  g.define("kMoeGateUpWidth", 2 * m.moe_intermediate_size, "an expert's gate | up: 2 × kMoeIntermediateSize");
  g.define("kMoeTokenGateUpWidth", m.num_experts_per_tok * 2 * m.moe_intermediate_size,
           "one token's chosen experts' gate | up");
  g.define("kMoeTokenActWidth", m.num_experts_per_tok * m.moe_intermediate_size, "one token's chosen experts' act");
  g.define("kMoeScratchPerToken", m.num_experts_per_tok + m.n_routed_experts + 1,
           "int scratch: (token, expert) pairs bucketed by expert, and bucket offsets");
  if (m.n_shared_experts > 0) {
    g.define("kSharedIntermediateSize", m.n_shared_experts * m.moe_intermediate_size,
             "shared experts, one MLP: n_shared_experts × moe_intermediate_size");
    g.define("kSharedGateUpWidth", 2 * m.n_shared_experts * m.moe_intermediate_size, "2 × kSharedIntermediateSize");
  }
  g.define("kNumGroups", m.n_group, "n_group");
  g.define("kTopkGroups", m.topk_group, "topk_group");
  g.define_real("kRoutedScalingFactor", m.routed_scaling_factor, "routed_scaling_factor");
  const double scale = yarn_scale_factor(s.rope) / std::sqrt(static_cast<double>(a.qk_nope_head_dim + a.qk_rope_head_dim));
  g.define_real("kAttnScale", scale, "softmax scale: kQkHeadDim^-0.5 × yarn mscale(factor, mscale_all_dim)²");
  define_decode_attention_constants(s, g, "kNumHeads", "kKvLoraRank");
}

void add_weights(const ModelSpec& s, Graph& g) {
  const MlaSpec& a = *s.mla;
  const MoeSpec& m = *s.moe;
  const int64_t H = s.hidden_size, Hn = s.num_attention_heads, L = s.num_hidden_layers, K = m.first_k_dense_replace;
  const int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim, kv_b_stride = a.qk_nope_head_dim + a.v_head_dim;
  const int64_t E = m.n_routed_experts, Im = m.moe_intermediate_size, Is = m.n_shared_experts * Im;
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
    layers("q_b_proj", 0, L, {Hn * qk, a.q_lora_rank}, {{{hf_layer("self_attn.q_b_proj.weight"), Hn * qk}}},
           "q up-projection: per head nope | rope");
  } else {
    layers("q_proj", 0, L, {Hn * qk, H}, {{{hf_layer("self_attn.q_proj.weight"), Hn * qk}}},
           "q projection: per head nope | rope");
  }
  layers("kv_a_proj_with_mqa", 0, L, {a.kv_lora_rank + a.qk_rope_head_dim, H},
         {{{hf_layer("self_attn.kv_a_proj_with_mqa.weight"), a.kv_lora_rank + a.qk_rope_head_dim}}},
         "kv down-projection: c_kv | k_rope");
  layers("kv_a_layernorm", 0, L, {a.kv_lora_rank}, {{{hf_layer("self_attn.kv_a_layernorm.weight"), 1}}},
         "RMSNorm of c_kv");
  layers("w_uk", 0, L, {Hn * a.qk_nope_head_dim, a.kv_lora_rank},
         {{{hf_layer("self_attn.kv_b_proj.weight"), a.qk_nope_head_dim, 0, Hn, kv_b_stride}}},
         "W_UK: kv_b_proj's k_nope rows of each head [heads × nope, kv_lora]");
  layers("w_uv", 0, L, {Hn * a.v_head_dim, a.kv_lora_rank},
         {{{hf_layer("self_attn.kv_b_proj.weight"), a.v_head_dim, a.qk_nope_head_dim, Hn, kv_b_stride}}},
         "W_UV: kv_b_proj's value rows of each head [heads × v, kv_lora]");
  layers("o_proj", 0, L, {H, Hn * a.v_head_dim}, {{{hf_layer("self_attn.o_proj.weight"), H}}},
         "attention output projection");
  layers("post_attention_layernorm", 0, L, {H}, {{{hf_layer("post_attention_layernorm.weight"), 1}}},
         "RMSNorm before the MLP / MoE");
  if (K > 0) {
    layers("gate_up_proj", 0, K, {2 * s.intermediate_size, H},
           {{{hf_layer("mlp.gate_proj.weight"), s.intermediate_size}, {hf_layer("mlp.up_proj.weight"), s.intermediate_size}}},
           "dense MLP gate_proj | up_proj rows, fused");
    layers("down_proj", 0, K, {H, s.intermediate_size}, {{{hf_layer("mlp.down_proj.weight"), H}}},
           "dense MLP down projection");
  }
  if (K < L) {
    layers("router", K, L, {E, H}, {{{hf_layer("mlp.gate.weight"), E}}}, "router: one row per routed expert");
    // Routed experts: per-expert tensors (the published checkpoints) or the fused tensors
    // transformers 5 saves; gate rows before up rows either way.
    layers("experts_gate_up", K, L, {E, 2 * Im, H},
           {{{hf_layer("mlp.experts.{E}.gate_proj.weight"), Im}, {hf_layer("mlp.experts.{E}.up_proj.weight"), Im}},
            {{hf_layer("mlp.experts.gate_up_proj"), E * 2 * Im}}},
           "routed experts' gate_proj | up_proj rows [experts, 2 × moe_intermediate, hidden]", E);
    layers("experts_down", K, L, {E, H, Im},
           {{{hf_layer("mlp.experts.{E}.down_proj.weight"), H}}, {{hf_layer("mlp.experts.down_proj"), E * H}}},
           "routed experts' down_proj [experts, hidden, moe_intermediate]", E);
    if (Is > 0) {
      layers("shared_gate_up", K, L, {2 * Is, H},
             {{{hf_layer("mlp.shared_experts.gate_proj.weight"), Is}, {hf_layer("mlp.shared_experts.up_proj.weight"), Is}}},
             "shared experts' gate_proj | up_proj rows, fused");
      layers("shared_down", K, L, {H, Is}, {{{hf_layer("mlp.shared_experts.down_proj.weight"), H}}},
             "shared experts' down projection");
    }
  }
  add_final_weights(s, g);
}

std::vector<Op> attention_ops(const ModelSpec& s, const Graph& g) {
  const MlaSpec& a = *s.mla;
  const int64_t Hn = s.num_attention_heads;
  std::vector<Op> ops;
  ops.push_back(make_rmsnorm(g, "input_layernorm", "x", "h", "kHiddenSize"));
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
  ops.push_back(make_linear(g, "self_attn.kv_a_proj_with_mqa", "kv_a_proj_with_mqa", "h", "kv_a", "kKvAWidth",
                            "kHiddenSize", LinearOut::store_bf16,
                            "(c_kv " + num(a.kv_lora_rank) + " | k_rope " + num(a.qk_rope_head_dim) + ")"));
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
  ops.push_back(make_op(OpKind::mla_q_absorb, "self_attn (absorbed W_UK)",
                        "q_mla[head] = W_UK[head]ᵀ · q_nope[head] | q_rope[head]   (" + num(a.qk_nope_head_dim) +
                            " -> " + num(a.kv_lora_rank) + " per head)",
                        {{"q", "q"}, {"w_uk", "w_uk"}, {"q_mla", "q_mla"}},
                        {{"heads", "kNumHeads"}, {"nope", "kQkNopeHeadDim"}, {"rope", "kQkRopeHeadDim"}, {"latent", "kKvLoraRank"}},
                        "mla_q_absorb"));
  ops.push_back(make_op(OpKind::mla_attention, "self_attn",
                        "o_latent = softmax((q_latent·c_kv + q_rope·k_rope) · " +
                            fmt_real(g.constant("kAttnScale").real_value) + " + causal mask) · c_kv   (" + num(Hn) +
                            " heads over one latent head)",
                        {{"q_mla", "q_mla"}, {"o_lat", "o_lat"}},
                        {{"heads", "kNumHeads"}, {"latent", "kKvLoraRank"}, {"rope", "kQkRopeHeadDim"},
                         {"page_size", "kPageSize"}, {"scale", "kAttnScale"}, {"partition", "kAttnPartition"},
                         {"max_partitions", "kAttnMaxPartitions"}},
                        "mla_attention"));
  ops.push_back(make_op(OpKind::mla_v_up, "self_attn (absorbed W_UV)",
                        "attn[head] = W_UV[head] · o_latent[head]   (" + num(a.kv_lora_rank) + " -> " +
                            num(a.v_head_dim) + " per head)",
                        {{"o_lat", "o_lat"}, {"w_uv", "w_uv"}, {"out", "attn"}},
                        {{"heads", "kNumHeads"}, {"latent", "kKvLoraRank"}, {"v", "kVHeadDim"}}, "mla_v_up"));
  ops.push_back(make_linear(g, "self_attn.o_proj", "o_proj", "attn", "x", "kHiddenSize", "kAttnOutWidth",
                            LinearOut::add_f32, ""));
  return ops;
}

std::vector<Op> dense_mlp_ops(const Graph& g) {
  std::vector<Op> ops;
  ops.push_back(make_rmsnorm(g, "post_attention_layernorm", "x", "h", "kHiddenSize"));
  ops.push_back(make_linear(g, "mlp.gate_proj,up_proj", "gate_up_proj", "h", "gate_up", "kGateUpWidth", "kHiddenSize",
                            LinearOut::store_bf16, ""));
  ops.push_back(make_silu_mul("mlp.act_fn", "gate_up", "act", "kIntermediateSize", g));
  ops.push_back(make_linear(g, "mlp.down_proj", "down_proj", "act", "x", "kHiddenSize", "kIntermediateSize",
                            LinearOut::add_f32, ""));
  return ops;
}

std::vector<Op> moe_ops(const ModelSpec& s, const Graph& g) {
  const MoeSpec& m = *s.moe;
  std::vector<Op> ops;
  ops.push_back(make_rmsnorm(g, "post_attention_layernorm", "x", "h", "kHiddenSize"));
  ops.push_back(make_linear(g, "mlp.gate", "router", "h", "router_logits", "kNumExperts", "kHiddenSize",
                            LinearOut::store_f32, ""));
  std::string how = m.topk_method == TopkMethod::greedy
                        ? "top " + num(m.num_experts_per_tok) + " of " + num(m.n_routed_experts)
                        : "top " + num(m.num_experts_per_tok) + " within the best " + num(m.topk_group) + " of " +
                              num(m.n_group) + " groups";
  const bool normalize = m.norm_topk_prob && m.num_experts_per_tok > 1;
  how += normalize ? ", weights renormalized" : ", weights × " + fmt_real(m.routed_scaling_factor);
  ops.push_back(make_op(OpKind::moe_route, "mlp.gate (routing)",
                        "experts, weights = route(softmax(router_logits))   (" + how + ")",
                        {{"logits", "router_logits"}, {"ids", "topk_ids"}, {"weights", "topk_weights"}},
                        {{"experts", "kNumExperts"}, {"top_k", "kNumExpertsPerTok"}, {"groups", "kNumGroups"},
                         {"topk_groups", "kTopkGroups"},
                         {"group_limited", m.topk_method == TopkMethod::group_limited_greedy ? "true" : "false"},
                         {"normalize", normalize ? "true" : "false"}, {"scaling", "kRoutedScalingFactor"}},
                        "moe_route"));
  const std::map<std::string, std::string> experts = {{"experts", "kNumExperts"}, {"top_k", "kNumExpertsPerTok"},
                                                      {"hidden", "kHiddenSize"}, {"inter", "kMoeIntermediateSize"}};
  ops.push_back(make_op(OpKind::moe_gate_up, "mlp.experts (gate_up_proj)",
                        "moe_gate_up[t, j] = h[t] · experts_gate_up[experts[t, j]]ᵀ   (only the chosen experts' weights are read)",
                        {{"h", "h"}, {"weight", "experts_gate_up"}, {"ids", "topk_ids"}, {"out", "moe_gate_up"},
                         {"scratch", "moe_scratch"}},
                        experts, "moe_experts_gate_up"));
  ops.push_back(make_silu_mul("mlp.experts (act_fn)", "moe_gate_up", "moe_act", "kMoeIntermediateSize", g,
                              "kNumExpertsPerTok"));
  ops.push_back(make_op(OpKind::moe_down, "mlp.experts (down_proj)",
                        "x += Σ_j weights[t, j] · experts_down[experts[t, j]] · moe_act[t, j]   (residual add fused)",
                        {{"act", "moe_act"}, {"weight", "experts_down"}, {"ids", "topk_ids"}, {"weights", "topk_weights"},
                         {"scratch", "moe_scratch"}, {"x", "x"}},
                        experts, "moe_experts_down"));
  if (m.n_shared_experts > 0) {
    ops.push_back(make_linear(g, "mlp.shared_experts.gate_proj,up_proj", "shared_gate_up", "h", "shared_gate_up",
                              "kSharedGateUpWidth", "kHiddenSize", LinearOut::store_bf16, ""));
    ops.push_back(make_silu_mul("mlp.shared_experts.act_fn", "shared_gate_up", "shared_act", "kSharedIntermediateSize", g));
    ops.push_back(make_linear(g, "mlp.shared_experts.down_proj", "shared_down", "shared_act", "x", "kHiddenSize",
                              "kSharedIntermediateSize", LinearOut::add_f32, ""));
  }
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
    if (m.n_shared_experts > 0) {
      g.buffers.push_back({"shared_gate_up", Elem::bf16, "kSharedGateUpWidth", "shared experts' gate | up"});
      g.buffers.push_back({"shared_act", Elem::bf16, "kSharedIntermediateSize", "shared experts' silu(gate) ⊙ up"});
    }
  }
  add_weights(s, g);

  const std::vector<Op> attention = attention_ops(s, g);
  if (m.first_k_dense_replace > 0) {
    g.blocks.push_back({"decoder_layer (dense MLP)", 0, m.first_k_dense_replace,
                        {{"self-attention (MLA)", attention}, {"MLP (SwiGLU)", dense_mlp_ops(g)}}});
  }
  if (m.first_k_dense_replace < s.num_hidden_layers) {
    g.blocks.push_back({"decoder_layer (DeepSeekMoE)", m.first_k_dense_replace, s.num_hidden_layers,
                        {{"self-attention (MLA)", attention}, {"DeepSeekMoE: routed experts + shared experts", moe_ops(s, g)}}});
  }
  add_prologue_epilogue(s, g);
}

}  // namespace kiln::codegen
