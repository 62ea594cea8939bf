// The golden fixtures as GGUF images (gguf_fixture.hpp).
#include "tests/golden/gguf_fixture.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <catch2/catch.hpp>

#include "runtime/core/dtype.hpp"
#include "runtime/model/rope_table.hpp"
#include "runtime/weights/float_convert.hpp"
#include "runtime/weights/quant_repack.hpp"
#include "tests/weights/test_support.hpp"

namespace kiln::golden {

namespace {

// HF name suffix -> GGUF name suffix (llama.cpp's tensor names).
const std::map<std::string, std::string> kLayerNames = {
    {"input_layernorm.weight", "attn_norm.weight"},     {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},       {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},  {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},  {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},        {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    // DeepSeek-V2
    {"self_attn.q_a_proj.weight", "attn_q_a.weight"},   {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
    {"self_attn.q_b_proj.weight", "attn_q_b.weight"},   {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
    {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"}, {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
};

std::string gguf_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  REQUIRE(hf.rfind(prefix, 0) == 0);
  const size_t dot = hf.find('.', prefix.size());
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  const auto it = kLayerNames.find(hf.substr(dot + 1));
  REQUIRE(it != kLayerNames.end());
  return "blk." + layer + "." + it->second;
}

std::vector<std::byte> quantize_q8_0(const std::vector<float>& x) {
  std::vector<std::byte> out(x.size() / 32 * 34);
  kiln::quantize_q8_0(x, out);  // ggml's quantize_row_q8_0_ref, as the loader requantizes
  return out;
}

void push_f16(std::vector<std::byte>& out, float v) {
  const uint16_t h = f32_to_f16(v);
  out.push_back(std::byte(h & 0xff));
  out.push_back(std::byte(h >> 8));
}

// A block's 32 quants q(0..31) as ggml stores them after its scales: with `fifth`, first qh (the
// fifth bits of values j and j + 16 as bits j and j + 16), then the low nibbles, value j's and j +
// 16's in byte j.
template <typename Quant>
void push_quants(std::vector<std::byte>& out, Quant&& q, bool fifth) {
  if (fifth) {
    uint32_t qh = 0;
    for (size_t j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((q(j) >> 4) & 1) << j;
    for (int i = 0; i < 4; ++i) out.push_back(std::byte(static_cast<uint8_t>(qh >> (8 * i))));
  }
  for (size_t j = 0; j < 16; ++j) out.push_back(std::byte(static_cast<uint8_t>((q(j) & 0x0F) | (q(j + 16) & 0x0F) << 4)));
}

// ggml's quantize_row_q4_1_ref (bits 4) and quantize_row_q5_1_ref (bits 5): per 32 values d = (max -
// min) / (2^bits - 1), q = (x - min) / d + 0.5 truncated (Q4_1: at most 15; value q · d + min), d and
// min stored as f16; Q5_1's fifth bits of values j and j + 16 then as bits j and j + 16 of qh.
std::vector<std::byte> quantize_with_min(const std::vector<float>& x, int bits) {
  const int top = (1 << bits) - 1;
  std::vector<std::byte> out;
  for (size_t b = 0; b < x.size(); b += 32) {
    const auto [lo, hi] = std::minmax_element(x.begin() + b, x.begin() + b + 32);
    const float min = *lo, d = (*hi - min) / static_cast<float>(top), id = d != 0 ? 1.0f / d : 0.0f;
    push_f16(out, d);
    push_f16(out, min);
    const auto q = [&](size_t i) {
      return std::min(top, static_cast<int>(static_cast<uint8_t>(static_cast<int8_t>((x[b + i] - min) * id + 0.5f))));
    };
    push_quants(out, q, bits == 5);
  }
  return out;
}

// The first of the 32 values from b of largest magnitude, with its sign (ggml's Q4_0 / Q5_0 "max").
float signed_amax(const std::vector<float>& x, size_t b) {
  float amax = 0, max = 0;
  for (size_t j = 0; j < 32; ++j) {
    if (std::fabs(x[b + j]) > amax) {
      amax = std::fabs(x[b + j]);
      max = x[b + j];
    }
  }
  return max;
}

// ggml's quantize_row_q4_0_ref: per 32 values the one of largest magnitude, m, gives d = m / -8,
// q = min(15, (int)(x / d + 8.5)) (0..15, value (q - 8) · d), d stored as f16.
std::vector<std::byte> quantize_q4_0(const std::vector<float>& x) {
  std::vector<std::byte> out;
  for (size_t b = 0; b < x.size(); b += 32) {
    const float d = signed_amax(x, b) / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
    push_f16(out, d);
    push_quants(out, [&](size_t i) { return std::min(15, static_cast<int>(x[b + i] * id + 8.5f)); }, false);
  }
  return out;
}

// ggml's quantize_row_q5_0_ref: as Q4_0 with d = m / -16 and q = min(31, (int8)(x / d + 16.5)) (0..31,
// value (q - 16) · d); the fifth bits of values j and j + 16 are bits j and j + 16 of qh.
std::vector<std::byte> quantize_q5_0(const std::vector<float>& x) {
  std::vector<std::byte> out;
  for (size_t b = 0; b < x.size(); b += 32) {
    const float d = signed_amax(x, b) / -16.0f, id = d != 0 ? 1.0f / d : 0.0f;
    push_f16(out, d);
    push_quants(out, [&](size_t i) { return std::min(31, static_cast<int>(static_cast<int8_t>(x[b + i] * id + 16.5f))); }, true);
  }
  return out;
}

}  // namespace

std::string config_field(const ModelInfo& m, const std::string& name) {
  for (const ConfigField& f : m.config_fields) {
    if (name == f.name) return f.value;
  }
  FAIL("no config field " << name);
  return "";
}
int64_t int_field(const ModelInfo& m, const std::string& name) { return std::stoll(config_field(m, name)); }
float real_field(const ModelInfo& m, const std::string& name) { return std::stof(config_field(m, name)); }

namespace {

// One GGUF tensor before it is written: torch shape and fp32 values.
struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// DeepSeek-V2's experts, as convert_hf_to_gguf stacks them: per layer and projection, expert 0's
// rows, then expert 1's, ... HF gives them per expert (mlp.experts.E.gate_proj.weight) or fused
// (transformers 5: mlp.experts.gate_up_proj [experts, 2 × moe_intermediate, hidden], down_proj).
void stack_expert(std::map<std::string, Tensor>& stacked, const std::string& layer, const std::string& hf_rest,
                  const std::vector<int64_t>& shape, const std::vector<float>& values, int64_t experts) {
  const auto append = [&](const std::string& proj, int64_t expert_rows, int64_t cols, const float* rows, int64_t count) {
    Tensor& t = stacked["blk." + layer + ".ffn_" + proj + "_exps.weight"];
    t.name = "blk." + layer + ".ffn_" + proj + "_exps.weight";
    t.shape = {experts, expert_rows, cols};
    t.values.insert(t.values.end(), rows, rows + count * cols);
  };
  if (hf_rest == "experts.gate_up_proj" || hf_rest == "experts.down_proj") {
    const int64_t rows = shape[1], cols = shape[2];
    for (int64_t e = 0; e < experts; ++e) {
      const float* expert = values.data() + e * rows * cols;
      if (hf_rest == "experts.down_proj") {
        append("down", rows, cols, expert, rows);
      } else {
        append("gate", rows / 2, cols, expert, rows / 2);
        append("up", rows / 2, cols, expert + rows / 2 * cols, rows / 2);
      }
    }
    return;
  }
  // experts.E.gate_proj.weight: names come sorted, so expert 10 may precede expert 2; keep slots.
  const size_t dot = hf_rest.find('.', 8);
  const int64_t e = std::stoll(hf_rest.substr(8, dot - 8));
  const std::string proj = hf_rest.substr(dot + 1, hf_rest.find('_', dot) - dot - 1);  // gate, up, down
  Tensor& t = stacked["blk." + layer + ".ffn_" + proj + "_exps.weight"];
  t.name = "blk." + layer + ".ffn_" + proj + "_exps.weight";
  t.shape = {experts, shape[0], shape[1]};
  t.values.resize(static_cast<size_t>(experts * shape[0] * shape[1]));
  std::copy(values.begin(), values.end(), t.values.begin() + e * shape[0] * shape[1]);
}

// kv_b_proj [heads × (nope + v), kv_lora] split as llama.cpp does for absorbed MLA: k_b [heads,
// kv_lora, nope] (each head's key rows transposed) and v_b [heads, v, kv_lora].
std::pair<Tensor, Tensor> split_kv_b(const std::string& layer, const std::vector<float>& kv_b, int64_t heads,
                                     int64_t nope, int64_t v, int64_t kv_lora) {
  Tensor k{"blk." + layer + ".attn_k_b.weight", {heads, kv_lora, nope}, {}};
  Tensor vb{"blk." + layer + ".attn_v_b.weight", {heads, v, kv_lora}, {}};
  k.values.resize(static_cast<size_t>(heads * kv_lora * nope));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < nope; ++r) {
      for (int64_t j = 0; j < kv_lora; ++j) k.values[(h * kv_lora + j) * nope + r] = kv_b[(h * (nope + v) + r) * kv_lora + j];
    }
    const auto first = kv_b.begin() + (h * (nope + v) + nope) * kv_lora;
    vb.values.insert(vb.values.end(), first, first + v * kv_lora);
  }
  return {std::move(k), std::move(vb)};
}

}  // namespace

std::vector<std::byte> fixture_as_gguf(const ModelDef& model, const TensorSource& hf, uint32_t all_type,
                                       float rope_freqs_scale, KvB kv_b,
                                       const std::map<std::string, uint32_t>& types_by_suffix) {
  const ModelInfo& m = model.info;
  const bool deepseek = std::string(m.family) == "deepseek_v2";
  const std::string arch = deepseek ? "deepseek2" : m.family;
  const bool llama = arch == "llama";
  const auto key = [&](const char* suffix) { return arch + "." + suffix; };
  test::GgufBuilder g;
  g.kv_string("general.architecture", arch);
  g.kv_u32(key("embedding_length"), static_cast<uint32_t>(m.hidden_size));
  g.kv_u32(key("block_count"), static_cast<uint32_t>(m.num_layers));
  g.kv_u32(key("attention.head_count"), static_cast<uint32_t>(m.num_attention_heads));
  g.kv_u32(key("feed_forward_length"), static_cast<uint32_t>(m.intermediate_size));
  g.kv_u32(key("context_length"), static_cast<uint32_t>(int_field(m, "max_position_embeddings")));
  g.kv_u32(key("vocab_size"), static_cast<uint32_t>(m.vocab_size));
  g.kv_f32(key("attention.layer_norm_rms_epsilon"), static_cast<float>(m.rms_norm_eps));
  g.kv_f32(key("rope.freq_base"), static_cast<float>(m.rope.theta));
  int64_t heads = m.num_attention_heads, nope = 0, v = 0, kv_lora = 0, experts = 0;
  if (deepseek) {
    nope = int_field(m, "qk_nope_head_dim");
    v = int_field(m, "v_head_dim");
    kv_lora = int_field(m, "kv_lora_rank");
    experts = int_field(m, "n_routed_experts");
    const int64_t rope = int_field(m, "qk_rope_head_dim");
    if (int_field(m, "q_lora_rank") > 0) g.kv_u32(key("attention.q_lora_rank"), static_cast<uint32_t>(int_field(m, "q_lora_rank")));
    g.kv_u32(key("attention.kv_lora_rank"), static_cast<uint32_t>(kv_lora));
    g.kv_u32(key("rope.dimension_count"), static_cast<uint32_t>(rope));
    if (kv_b == KvB::split) {  // MQA over the latent, per-head sizes in the _mla keys
      g.kv_u32(key("attention.head_count_kv"), 1);
      g.kv_u32(key("attention.key_length"), static_cast<uint32_t>(kv_lora + rope));
      g.kv_u32(key("attention.value_length"), static_cast<uint32_t>(kv_lora));
      g.kv_u32(key("attention.key_length_mla"), static_cast<uint32_t>(nope + rope));
      g.kv_u32(key("attention.value_length_mla"), static_cast<uint32_t>(v));
    } else {
      g.kv_u32(key("attention.head_count_kv"), static_cast<uint32_t>(heads));
      g.kv_u32(key("attention.key_length"), static_cast<uint32_t>(nope + rope));
      g.kv_u32(key("attention.value_length"), static_cast<uint32_t>(v));
    }
    g.kv_u32(key("expert_count"), static_cast<uint32_t>(experts));
    g.kv_u32(key("expert_used_count"), static_cast<uint32_t>(int_field(m, "num_experts_per_tok")));
    g.kv_u32(key("expert_shared_count"), static_cast<uint32_t>(int_field(m, "n_shared_experts")));
    g.kv_u32(key("expert_feed_forward_length"), static_cast<uint32_t>(int_field(m, "moe_intermediate_size")));
    g.kv_u32(key("leading_dense_block_count"), static_cast<uint32_t>(int_field(m, "first_k_dense_replace")));
    g.kv_u32(key("expert_group_count"), static_cast<uint32_t>(int_field(m, "n_group")));
    g.kv_u32(key("expert_group_used_count"), static_cast<uint32_t>(int_field(m, "topk_group")));
    g.kv_f32(key("expert_weights_scale"), real_field(m, "routed_scaling_factor"));
    if (config_field(m, "norm_topk_prob") == "true") g.kv_bool(key("expert_weights_norm"), true);
    g.kv_u32(key("expert_gating_func"), 1);  // softmax
    if (m.rope.kind == RopeKind::yarn) {
      g.kv_string(key("rope.scaling.type"), "yarn");
      g.kv_f32(key("rope.scaling.factor"), static_cast<float>(m.rope.factor));
      g.kv_u32(key("rope.scaling.original_context_length"), static_cast<uint32_t>(m.rope.original_max_position_embeddings));
      g.kv_f32(key("rope.scaling.yarn_beta_fast"), static_cast<float>(m.rope.beta_fast));
      g.kv_f32(key("rope.scaling.yarn_beta_slow"), static_cast<float>(m.rope.beta_slow));
      g.kv_f32(key("rope.scaling.yarn_log_multiplier"), static_cast<float>(0.1 * m.rope.mscale_all_dim));
    }
  } else {
    g.kv_u32(key("attention.head_count_kv"), static_cast<uint32_t>(m.num_key_value_heads));
    g.kv_u32(key("attention.key_length"), static_cast<uint32_t>(m.head_dim));
    g.kv_u32(key("attention.value_length"), static_cast<uint32_t>(m.head_dim));
    g.kv_u32(key("rope.dimension_count"), static_cast<uint32_t>(m.head_dim));
  }

  std::vector<Tensor> tensors;
  std::map<std::string, Tensor> stacked;  // experts, written after the other tensors
  for (const std::string& name : hf.names()) {
    const std::vector<int64_t> shape = *hf.shape(name);
    const int64_t cols = shape.back();
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
    std::vector<float> values(static_cast<size_t>(rows * cols));
    hf.read_rows(name, 0, rows, values.data());
    const bool q = name.ends_with("q_proj.weight"), k = name.ends_with("k_proj.weight");
    if (llama && (q || k)) values = test::permute_rows_like_llama_cpp(values, rows, cols, q ? m.num_attention_heads : m.num_key_value_heads);
    const size_t experts_at = name.find(".mlp.experts.");
    if (experts_at != std::string::npos) {
      const std::string layer = name.substr(13, name.find('.', 13) - 13);  // model.layers.N.
      stack_expert(stacked, layer, name.substr(experts_at + 5), shape, values, experts);
      continue;
    }
    if (name.ends_with("kv_b_proj.weight") && kv_b == KvB::split) {
      auto [k_b, v_b] = split_kv_b(name.substr(13, name.find('.', 13) - 13), values, heads, nope, v, kv_lora);
      tensors.push_back(std::move(k_b));
      tensors.push_back(std::move(v_b));
      continue;
    }
    tensors.push_back({gguf_name(name), shape, std::move(values)});
  }
  for (auto& [name, t] : stacked) tensors.push_back(std::move(t));
  for (Tensor& t : tensors) {
    const int64_t cols = t.shape.back();
    uint32_t type = all_type;
    for (const auto& [suffix, other] : types_by_suffix) {
      if (t.name.ends_with(suffix)) type = other;
    }
    std::vector<uint64_t> ne(t.shape.rbegin(), t.shape.rend());
    if (type == kBF16 && t.shape.size() >= 2) {
      std::vector<uint16_t> bits(t.values.size());
      f32_elements_to_bf16(t.values, bits);
      g.tensor(t.name, std::move(ne), kBF16, test::to_bytes(bits));
      continue;
    }
    const bool quantize = type != kF32 && type != kBF16 && t.shape.size() >= 2 && cols % 32 == 0;
    g.tensor(t.name, std::move(ne), quantize ? type : kF32,
             !quantize           ? test::to_bytes(t.values)
             : type == kQ8_0     ? quantize_q8_0(t.values)
             : type == kQ4_1     ? quantize_with_min(t.values, 4)
             : type == kQ5_1     ? quantize_with_min(t.values, 5)
             : type == kQ5_0     ? quantize_q5_0(t.values)
                                 : quantize_q4_0(t.values));
  }
  if (m.rope.kind == RopeKind::llama3 && rope_freqs_scale != 0) {
    std::vector<float> divisors = rope_freq_divisors(m.rope);  // llama.cpp divides theta's frequencies by these
    for (float& d : divisors) d *= rope_freqs_scale;
    g.tensor("rope_freqs.weight", {divisors.size()}, kF32, test::to_bytes(divisors));
  }
  return g.build();
}


}  // namespace kiln::golden
