#include "codegen/architecture_fields.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace kiln::codegen {
namespace {

class FieldList {
 public:
  void integer(const char* name, int64_t v) { fields_.push_back({name, std::to_string(v), false}); }
  void real(const char* name, double v) {
    // Shortest round-trip form; whole numbers in plain digits (rope_theta 500000, not 5e+05).
    char text[64];
    const bool whole = std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15;
    const auto end = whole ? std::to_chars(text, text + sizeof text, v, std::chars_format::fixed).ptr
                           : std::to_chars(text, text + sizeof text, v).ptr;
    fields_.push_back({name, std::string(text, end), true});
  }
  void boolean(const char* name, bool v) { fields_.push_back({name, v ? "true" : "false", false}); }
  void text(const char* name, const std::string& v) { fields_.push_back({name, v, false}); }
  std::vector<ArchitectureField> take() { return std::move(fields_); }

 private:
  std::vector<ArchitectureField> fields_;
};

}  // namespace

std::vector<ArchitectureField> architecture_fields(const ModelSpec& s) {
  FieldList f;
  f.text("model_type", to_string(s.family));
  f.integer("vocab_size", s.vocab_size);
  f.integer("hidden_size", s.hidden_size);
  f.integer("num_hidden_layers", s.num_hidden_layers);
  f.integer("num_attention_heads", s.num_attention_heads);
  f.integer("num_key_value_heads", s.num_key_value_heads);
  if (!s.mla) f.integer("head_dim", s.head_dim);
  f.integer("intermediate_size", s.intermediate_size);
  f.integer("max_position_embeddings", s.max_position_embeddings);
  f.real("rms_norm_eps", s.rms_norm_eps);
  f.boolean("tie_word_embeddings", s.tie_word_embeddings);
  const RopeSpec& r = s.rope;
  f.real("rope_theta", r.theta);
  f.text("rope_type", to_string(r.type));
  if (r.type != RopeType::standard) {
    f.real("factor", r.factor);
    f.integer("original_max_position_embeddings", r.original_max_position_embeddings);
  }
  if (r.type == RopeType::llama3) {
    f.real("low_freq_factor", r.low_freq_factor);
    f.real("high_freq_factor", r.high_freq_factor);
  }
  if (r.type == RopeType::yarn) {
    f.real("beta_fast", r.beta_fast);
    f.real("beta_slow", r.beta_slow);
    f.real("mscale", r.mscale);
    f.real("mscale_all_dim", r.mscale_all_dim);
  }
  if (s.mla) {
    f.integer("q_lora_rank", s.mla->q_lora_rank);
    f.integer("kv_lora_rank", s.mla->kv_lora_rank);
    f.integer("qk_nope_head_dim", s.mla->qk_nope_head_dim);
    f.integer("qk_rope_head_dim", s.mla->qk_rope_head_dim);
    f.integer("v_head_dim", s.mla->v_head_dim);
  }
  if (s.moe) {
    const MoeSpec& m = *s.moe;
    f.integer("n_routed_experts", m.n_routed_experts);
    f.integer("n_shared_experts", m.n_shared_experts);
    f.integer("num_experts_per_tok", m.num_experts_per_tok);
    f.integer("moe_intermediate_size", m.moe_intermediate_size);
    f.integer("first_k_dense_replace", m.first_k_dense_replace);
    f.text("topk_method", to_string(m.topk_method));
    f.integer("n_group", m.n_group);
    f.integer("topk_group", m.topk_group);
    f.boolean("norm_topk_prob", m.norm_topk_prob);
    f.real("routed_scaling_factor", m.routed_scaling_factor);
  }
  return f.take();
}

bool same_value(const ArchitectureField& a, const ArchitectureField& b) {
  if (a.value == b.value) return true;
  if (!a.real || !b.real) return false;
  const double x = std::strtod(a.value.c_str(), nullptr), y = std::strtod(b.value.c_str(), nullptr);
  return std::fabs(x - y) <= 1e-6 * std::max(std::fabs(x), std::fabs(y));
}

}  // namespace kiln::codegen
