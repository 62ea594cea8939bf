// GGUF files of the architectures kiln builds, seen as the HF checkpoint they were converted from:
// hyperparameters as HF config fields, tensors under HF names in torch shapes, with llama.cpp's
// q/k RoPE row permutation undone where its converter applied one.
//   general.architecture "llama" (Llama, SmolLM2) -> HF model_type llama (q/k rows permuted)
//   general.architecture "qwen3"                  -> HF model_type qwen3 (per-head q/k norms; no permutation)
//   general.architecture "deepseek2"              -> HF model_type deepseek_v2 (MLA with kv_b whole or split
//                                                    into k_b / v_b; experts stacked per layer)
// Other architectures are refused naming the file, the architecture and what kiln reads.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/weights/gguf.hpp"

namespace kiln {

struct GgufRopeScaling {
  std::string type;                                        // "linear" or "yarn"
  double factor = 1.0;                                     // ARCH.rope.scaling.factor
  std::optional<int64_t> original_max_position_embeddings; // ARCH.rope.scaling.original_context_length
  std::optional<double> beta_fast, beta_slow;              // ARCH.rope.scaling.yarn_beta_fast / _slow
  std::optional<double> mscale_all_dim;                    // ARCH.rope.scaling.yarn_log_multiplier / 0.1
};

// DeepSeek-V2's multi-head latent attention, as HF's config names it.
struct GgufMla {
  std::optional<int64_t> q_lora_rank;  // ARCH.attention.q_lora_rank (absent: q_proj, no q LoRA)
  int64_t kv_lora_rank = 0;            // ARCH.attention.kv_lora_rank
  int64_t qk_nope_head_dim = 0;        // key_length_mla (or key_length) - rope.dimension_count
  int64_t qk_rope_head_dim = 0;        // ARCH.rope.dimension_count
  int64_t v_head_dim = 0;              // ARCH.attention.value_length_mla (or value_length)
};

// DeepSeekMoE's routing, as HF's config names it.
struct GgufMoe {
  int64_t n_routed_experts = 0;        // ARCH.expert_count
  int64_t num_experts_per_tok = 0;     // ARCH.expert_used_count
  int64_t n_shared_experts = 0;        // ARCH.expert_shared_count
  int64_t moe_intermediate_size = 0;   // ARCH.expert_feed_forward_length
  int64_t first_k_dense_replace = 0;   // ARCH.leading_dense_block_count
  std::optional<int64_t> n_group;      // ARCH.expert_group_count (absent: llama.cpp routes without groups)
  std::optional<int64_t> topk_group;   // ARCH.expert_group_used_count
  double routed_scaling_factor = 1.0;  // ARCH.expert_weights_scale
  bool norm_topk_prob = false;         // ARCH.expert_weights_norm
};

// The HF config fields a GGUF file determines. Keys are read under the file's architecture
// (ARCH.embedding_length, below as llama.*). Float fields stored as FLOAT32 are given as the shortest
// decimal that rounds to that float (9.99999974e-06 reads back as 1e-05, what the HF config said),
// so they compare equal to a config's values.
struct GgufHyperparams {
  std::string architecture;             // general.architecture: "llama", "qwen3", "deepseek2"
  std::string model_type;               // the HF model_type it was converted from: "llama", "qwen3", "deepseek_v2"
  bool rope_permuted = false;           // q/k rows interleaved by convert_hf_to_gguf (llama only)
  bool qk_norm = false;                 // per-head q/k RMSNorm weights (qwen3)
  int64_t hidden_size = 0;              // llama.embedding_length
  int64_t num_hidden_layers = 0;        // llama.block_count
  int64_t num_attention_heads = 0;      // llama.attention.head_count
  int64_t num_key_value_heads = 0;      // llama.attention.head_count_kv (default: head_count)
  int64_t head_dim = 0;                 // llama.attention.key_length (default: hidden / heads); 0 for MLA
  int64_t intermediate_size = 0;        // llama.feed_forward_length
  int64_t max_position_embeddings = 0;  // llama.context_length
  int64_t vocab_size = 0;               // llama.vocab_size, else the token list's length
  double rms_norm_eps = 0;              // llama.attention.layer_norm_rms_epsilon
  double rope_theta = 10000.0;          // llama.rope.freq_base (llama.cpp's default when absent)
  std::optional<GgufRopeScaling> rope_scaling;
  bool has_rope_freqs = false;          // rope_freqs.weight present: Llama-3.1-style scaling factors
  bool tie_word_embeddings = false;     // no output.weight: lm_head is the embedding
  std::optional<int64_t> bos_token_id;  // tokenizer.ggml.bos_token_id
  std::optional<int64_t> eos_token_id;  // tokenizer.ggml.eos_token_id
  std::optional<GgufMla> mla;           // deepseek2 only
  std::optional<GgufMoe> moe;           // deepseek2 only
};

// Reads and cross-checks the hyperparameters (against each other and the tensor shapes).
// Throws naming the file and key for an architecture kiln does not read or inconsistent metadata.
GgufHyperparams read_gguf_hyperparams(const GgufFile& gguf);

// One HF tensor backed by GGUF tensor data. Cheap to hold: no data is converted until read.
struct HfTensorSource {
  std::string hf_name;           // "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;    // torch order: the GGUF ne reversed (one expert's slice for stacked experts)
  const GgufTensor* gguf = nullptr;
  int64_t unpermute_heads = 0;   // > 0: rows are q/k rows interleaved for RoPE over this many heads
  int64_t first_gguf_row = 0;    // where the rows start in `gguf` (expert E of a stacked [experts, rows, cols])
  // DeepSeek-V2's kv_b_proj rebuilt from llama.cpp's split layout: `gguf` is attn_v_b ([heads, v, kv_lora]),
  // `k_b` attn_k_b ([heads, kv_lora, nope]: each head's key rows transposed). Per head, HF has the nope
  // key rows, then the v value rows.
  const GgufTensor* k_b = nullptr;
  int64_t k_b_nope = 0;

  int64_t numel() const;
  int64_t row_length() const { return shape.back(); }  // elements per row (GGUF ne[0])
  int64_t rows() const { return numel() / row_length(); }
  // Dequantizes the whole tensor, in HF layout, into out (numel() floats).
  void read_f32(std::span<float> out) const;
  // Dequantizes HF rows [first_row, first_row + out.size() / row_length()) into out.
  void read_rows_f32(int64_t first_row, std::span<float> out) const;
  // HF row `hf_row` as the file stores it (ggml blocks); empty for the rebuilt split kv_b_proj.
  std::span<const std::byte> stored_row(int64_t hf_row) const;

 private:
  void read_split_kv_b_rows(int64_t first_row, std::span<float> out) const;
};

// The HF tensors of a GGUF file, in HF checkpoint order (embedding, each layer's norms,
// attention and MLP weights, final norm, lm_head when untied). Every GGUF tensor is accounted
// for: names kiln does not map, missing layer tensors and wrong shapes are errors naming them.
// The returned objects point into `gguf`, which must outlive them.
std::vector<HfTensorSource> gguf_hf_tensors(const GgufFile& gguf, const GgufHyperparams& hp);

// The GGUF row holding HF row `hf_row` of a q/k projection whose heads have `head_dim` rows.
// convert_hf_to_gguf's permute views the rows as (heads, 2, head_dim / 2) and swaps the last
// two axes, so HF row (h, s, i) was stored as GGUF row (h, i, s).
int64_t llama_gguf_row_of_hf_row(int64_t hf_row, int64_t head_dim);

}  // namespace kiln
