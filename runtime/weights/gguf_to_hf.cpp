#include "runtime/weights/gguf_to_hf.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "runtime/core/error.hpp"
#include "runtime/weights/safetensors.hpp"

namespace kiln {

nlohmann::json gguf_hf_config(const GgufHyperparams& hp, DType dtype) {
  const bool qwen3 = hp.model_type == "qwen3", deepseek = hp.model_type == "deepseek_v2";
  nlohmann::json config = {
      {"architectures", {qwen3 ? "Qwen3ForCausalLM" : deepseek ? "DeepseekV2ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", hp.model_type},
      {"hidden_size", hp.hidden_size},
      {"intermediate_size", hp.intermediate_size},
      {"num_hidden_layers", hp.num_hidden_layers},
      {"num_attention_heads", hp.num_attention_heads},
      {"num_key_value_heads", hp.num_key_value_heads},
      {"hidden_act", "silu"},
      {"max_position_embeddings", hp.max_position_embeddings},
      {"rms_norm_eps", hp.rms_norm_eps},
      {"rope_theta", hp.rope_theta},
      {"vocab_size", hp.vocab_size},
      {"tie_word_embeddings", hp.tie_word_embeddings},
      {"attention_bias", false},
      {"torch_dtype", dtype == DType::BF16 ? "bfloat16" : "float32"},
  };
  if (!qwen3) config["mlp_bias"] = false;
  if (!hp.mla) config["head_dim"] = hp.head_dim;
  if (hp.mla) {
    const GgufMla& m = *hp.mla;
    config["q_lora_rank"] = m.q_lora_rank ? nlohmann::json(*m.q_lora_rank) : nlohmann::json(nullptr);
    config["kv_lora_rank"] = m.kv_lora_rank;
    config["qk_nope_head_dim"] = m.qk_nope_head_dim;
    config["qk_rope_head_dim"] = m.qk_rope_head_dim;
    config["v_head_dim"] = m.v_head_dim;
  }
  if (hp.moe) {
    const GgufMoe& m = *hp.moe;
    config["n_routed_experts"] = m.n_routed_experts;
    config["n_shared_experts"] = m.n_shared_experts;
    config["num_experts_per_tok"] = m.num_experts_per_tok;
    config["moe_intermediate_size"] = m.moe_intermediate_size;
    config["first_k_dense_replace"] = m.first_k_dense_replace;
    const int64_t groups = m.n_group.value_or(1);
    config["n_group"] = groups;
    config["topk_group"] = m.topk_group.value_or(groups);
    config["topk_method"] = groups > 1 ? "group_limited_greedy" : "greedy";
    config["norm_topk_prob"] = m.norm_topk_prob;
    config["routed_scaling_factor"] = m.routed_scaling_factor;
    config["scoring_func"] = "softmax";
  }
  config["rope_scaling"] = nullptr;
  if (hp.rope_scaling) {
    const GgufRopeScaling& r = *hp.rope_scaling;
    nlohmann::json scaling = {{"rope_type", r.type}, {"factor", r.factor}};
    if (r.original_max_position_embeddings) scaling["original_max_position_embeddings"] = *r.original_max_position_embeddings;
    if (r.type == "yarn") {
      // What llama.cpp assumes where the file is silent: HF's defaults, and mscale = mscale_all_dim.
      scaling["beta_fast"] = r.beta_fast.value_or(32.0);
      scaling["beta_slow"] = r.beta_slow.value_or(1.0);
      if (r.mscale_all_dim) {
        scaling["mscale"] = *r.mscale_all_dim;
        scaling["mscale_all_dim"] = *r.mscale_all_dim;
      }
    }
    config["rope_scaling"] = scaling;
  }
  if (hp.bos_token_id) config["bos_token_id"] = *hp.bos_token_id;
  if (hp.eos_token_id) config["eos_token_id"] = *hp.eos_token_id;
  return config;
}

void convert_gguf_to_hf(const std::string& gguf_path, const std::string& out_dir, DType dtype) {
  if (dtype != DType::F32 && dtype != DType::BF16) {
    fail("gguf-to-hf: output dtype ", dtype_name(dtype), " is not supported (expected F32 or BF16)");
  }
  const GgufFile gguf(gguf_path);
  const GgufHyperparams hp = read_gguf_hyperparams(gguf);
  if (hp.has_rope_freqs) {
    fail(gguf_path, ": has rope_freqs.weight (Llama-3.1-style RoPE scaling factors), which gguf-to-hf cannot express "
         "as an HF rope_scaling config");
  }
  const std::vector<HfTensorSource> sources = gguf_hf_tensors(gguf, hp);

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) fail(out_dir, ": cannot create directory (", ec.message(), ")");

  std::vector<TensorSpec> specs;
  int64_t largest = 0;
  for (const HfTensorSource& s : sources) {
    specs.push_back({s.hf_name, dtype, s.shape});
    largest = std::max(largest, s.numel());
  }
  // One tensor's worth of buffers, reused for every tensor.
  std::vector<float> values(static_cast<size_t>(largest));
  std::vector<uint16_t> bf16(dtype == DType::BF16 ? static_cast<size_t>(largest) : 0);
  const auto produce = [&](size_t i) -> std::span<const std::byte> {
    const size_t n = static_cast<size_t>(sources[i].numel());
    sources[i].read_f32(std::span<float>(values.data(), n));
    if (dtype == DType::F32) return std::as_bytes(std::span<const float>(values.data(), n));
    std::transform(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(n), bf16.begin(), f32_to_bf16);
    return std::as_bytes(std::span<const uint16_t>(bf16.data(), n));
  };
  const std::string weights_path = (std::filesystem::path(out_dir) / "model.safetensors").string();
  write_safetensors_streaming(weights_path, specs, produce, {{"format", "pt"}, {"source", gguf_path}});

  const std::string config_path = (std::filesystem::path(out_dir) / "config.json").string();
  std::ofstream config(config_path, std::ios::trunc);
  if (!config) fail(config_path, ": cannot create");
  config << gguf_hf_config(hp, dtype).dump(2) << "\n";
  config.close();
  if (!config) fail(config_path, ": write failed");
}

}  // namespace kiln
