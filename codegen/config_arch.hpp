// Reading the architecture fields, shared by the kiln YAML and HF config.json front ends: kiln's
// YAML uses HF's field names, so one reader serves both (templated on the file format).
#pragma once

#include <string>

#include "codegen/config_fields.hpp"
#include "codegen/model_spec.hpp"

namespace kiln::codegen {

// RoPE: either `rope_parameters` (transformers 5: rope_theta inside, rope_type) or `rope_theta`
// plus an optional `rope_scaling` (older configs; its type key is `rope_type` or `type`).
template <typename Adapter>
RopeSpec read_rope(const Fields<Adapter>& arch, Family family) {
  RopeSpec rope;
  const bool has_parameters = arch.has("rope_parameters");
  const bool has_scaling = arch.has("rope_scaling");
  std::optional<Fields<Adapter>> scaling;
  if (has_parameters) {
    scaling.emplace(arch.section("rope_parameters"));
    rope.theta = scaling->positive_number("rope_theta");
    arch.mark_read("rope_theta");  // transformers 5 may write both; rope_parameters wins
  } else {
    rope.theta = arch.positive_number("rope_theta");
    if (has_scaling) scaling.emplace(arch.section("rope_scaling"));
  }
  if (!scaling) return rope;

  const std::string type_key = scaling->has("rope_type") ? "rope_type" : "type";
  if (scaling->has("rope_type") && scaling->has("type")) scaling->mark_read("type");
  const std::string type = scaling->choice(type_key, {"default", "llama3", "yarn"});
  if (type == "default") {
    rope.type = RopeType::standard;
  } else if (type == "llama3") {
    if (family == Family::deepseek_v2) scaling->error(type_key, "llama3 rope scaling is supported for llama and qwen3 only");
    rope.type = RopeType::llama3;
    rope.factor = scaling->positive_number("factor");
    rope.low_freq_factor = scaling->positive_number("low_freq_factor");
    rope.high_freq_factor = scaling->positive_number("high_freq_factor");
    rope.original_max_position_embeddings = scaling->integer("original_max_position_embeddings", 1);
  } else {
    if (family != Family::deepseek_v2) scaling->error(type_key, "yarn rope scaling is supported for deepseek_v2 only");
    rope.type = RopeType::yarn;
    rope.factor = scaling->positive_number("factor");
    rope.original_max_position_embeddings = scaling->integer("original_max_position_embeddings", 1);
    rope.beta_fast = scaling->number_or("beta_fast", 32.0);
    rope.beta_slow = scaling->number_or("beta_slow", 1.0);
    rope.mscale = scaling->number_or("mscale", 1.0);
    rope.mscale_all_dim = scaling->number_or("mscale_all_dim", 0.0);
  }
  return rope;
}

// The MLA and MoE fields of DeepSeek-V2, HF names.
template <typename Adapter>
void read_deepseek(const Fields<Adapter>& arch, ModelSpec& spec) {
  MlaSpec mla;
  mla.q_lora_rank = arch.has("q_lora_rank") ? arch.integer("q_lora_rank", 1) : 0;
  arch.mark_read("q_lora_rank");
  mla.kv_lora_rank = arch.integer("kv_lora_rank", 1);
  mla.qk_nope_head_dim = arch.integer("qk_nope_head_dim", 1);
  mla.qk_rope_head_dim = arch.integer("qk_rope_head_dim", 1);
  mla.v_head_dim = arch.integer("v_head_dim", 1);
  spec.mla = mla;

  MoeSpec moe;
  moe.n_routed_experts = arch.integer("n_routed_experts", 1);
  moe.n_shared_experts = arch.integer("n_shared_experts", 0);
  moe.num_experts_per_tok = arch.integer("num_experts_per_tok", 1);
  moe.moe_intermediate_size = arch.integer("moe_intermediate_size", 1);
  moe.first_k_dense_replace = arch.integer("first_k_dense_replace", 0);
  const std::string method = arch.choice("topk_method", {"greedy", "group_limited_greedy"});
  moe.topk_method = method == "greedy" ? TopkMethod::greedy : TopkMethod::group_limited_greedy;
  moe.n_group = arch.integer_or("n_group", 1, 1);
  moe.topk_group = arch.integer_or("topk_group", 1, 1);
  moe.norm_topk_prob = arch.boolean_or("norm_topk_prob", false);
  moe.routed_scaling_factor = arch.has("routed_scaling_factor") ? arch.positive_number("routed_scaling_factor") : 1.0;
  spec.moe = moe;
}

// Fields common to every family. `head_dim` may be absent (then hidden_size / heads).
template <typename Adapter>
void read_architecture(const Fields<Adapter>& arch, ModelSpec& spec) {
  spec.hidden_size = arch.integer("hidden_size", 1);
  spec.num_hidden_layers = arch.integer("num_hidden_layers", 1);
  spec.num_attention_heads = arch.integer("num_attention_heads", 1);
  spec.num_key_value_heads = arch.integer_or("num_key_value_heads", spec.num_attention_heads, 1);
  spec.intermediate_size = arch.integer("intermediate_size", 1);
  spec.vocab_size = arch.integer("vocab_size", 1);
  spec.max_position_embeddings = arch.integer("max_position_embeddings", 1);
  spec.rms_norm_eps = arch.positive_number("rms_norm_eps");
  spec.tie_word_embeddings = arch.boolean_or("tie_word_embeddings", false);
  spec.rope = read_rope(arch, spec.family);
  spec.bos_token_id = arch.has("bos_token_id") ? arch.integer("bos_token_id", 0) : -1;
  arch.mark_read("bos_token_id");
  if (arch.has("eos_token_id")) spec.eos_token_ids = arch.integer_list("eos_token_id", 0);
  arch.mark_read("eos_token_id");

  if (spec.family == Family::deepseek_v2) {
    read_deepseek(arch, spec);
    arch.mark_read("head_dim");  // transformers 5 writes head_dim = qk_rope_head_dim; MLA dims rule
    arch.mark_read("qk_head_dim");
  } else {
    if (arch.has("head_dim")) {
      spec.head_dim = arch.integer("head_dim", 1);
    } else {
      if (spec.hidden_size % spec.num_attention_heads != 0) {
        arch.error("num_attention_heads", "must divide hidden_size (" + std::to_string(spec.hidden_size) +
                                              ") when head_dim is not given");
      }
      spec.head_dim = spec.hidden_size / spec.num_attention_heads;
    }
  }
}

}  // namespace kiln::codegen
