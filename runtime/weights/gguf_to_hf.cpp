#include "runtime/weights/gguf_to_hf.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "runtime/core/error.hpp"
#include "runtime/weights/safetensors.hpp"

namespace kiln {

nlohmann::json llama_hf_config(const LlamaHyperparams& hp, DType dtype) {
  nlohmann::json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", hp.hidden_size},
      {"intermediate_size", hp.intermediate_size},
      {"num_hidden_layers", hp.num_hidden_layers},
      {"num_attention_heads", hp.num_attention_heads},
      {"num_key_value_heads", hp.num_key_value_heads},
      {"head_dim", hp.head_dim},
      {"hidden_act", "silu"},
      {"max_position_embeddings", hp.max_position_embeddings},
      {"rms_norm_eps", hp.rms_norm_eps},
      {"rope_theta", hp.rope_theta},
      {"vocab_size", hp.vocab_size},
      {"tie_word_embeddings", hp.tie_word_embeddings},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"torch_dtype", dtype == DType::BF16 ? "bfloat16" : "float32"},
  };
  config["rope_scaling"] = nullptr;
  if (hp.rope_scaling) {
    nlohmann::json scaling = {{"rope_type", hp.rope_scaling->type}, {"factor", hp.rope_scaling->factor}};
    if (hp.rope_scaling->original_max_position_embeddings) {
      scaling["original_max_position_embeddings"] = *hp.rope_scaling->original_max_position_embeddings;
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
  const LlamaHyperparams hp = read_llama_hyperparams(gguf);
  if (hp.has_rope_freqs) {
    fail(gguf_path, ": has rope_freqs.weight (Llama-3.1-style RoPE scaling factors), which gguf-to-hf cannot express "
         "as an HF rope_scaling config");
  }
  const std::vector<HfTensorSource> sources = llama_hf_tensors(gguf, hp);

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
  config << llama_hf_config(hp, dtype).dump(2) << "\n";
  config.close();
  if (!config) fail(config_path, ": write failed");
}

}  // namespace kiln
