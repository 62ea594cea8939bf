// Llama-architecture GGUF files (general.architecture "llama") seen as the HF checkpoint they were
// converted from: hyperparameters as HF config fields, tensors under HF names in torch shapes,
// with llama.cpp's q/k RoPE row permutation undone.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/weights/gguf.hpp"

namespace kiln {

struct LlamaRopeScaling {
  std::string type;                                        // "linear" or "yarn"
  double factor = 1.0;                                     // llama.rope.scaling.factor
  std::optional<int64_t> original_max_position_embeddings; // llama.rope.scaling.original_context_length
};

// The HF LlamaConfig fields a GGUF file determines. Float fields stored as FLOAT32 are given as
// the shortest decimal that rounds to that float (9.99999974e-06 reads back as 1e-05, what the
// HF config said), so they compare equal to a config's values.
struct LlamaHyperparams {
  int64_t hidden_size = 0;              // llama.embedding_length
  int64_t num_hidden_layers = 0;        // llama.block_count
  int64_t num_attention_heads = 0;      // llama.attention.head_count
  int64_t num_key_value_heads = 0;      // llama.attention.head_count_kv (default: head_count)
  int64_t head_dim = 0;                 // llama.attention.key_length (default: hidden / heads)
  int64_t intermediate_size = 0;        // llama.feed_forward_length
  int64_t max_position_embeddings = 0;  // llama.context_length
  int64_t vocab_size = 0;               // llama.vocab_size, else the token list's length
  double rms_norm_eps = 0;              // llama.attention.layer_norm_rms_epsilon
  double rope_theta = 10000.0;          // llama.rope.freq_base (llama.cpp's default when absent)
  std::optional<LlamaRopeScaling> rope_scaling;
  bool has_rope_freqs = false;          // rope_freqs.weight present: Llama-3.1-style scaling factors
  bool tie_word_embeddings = false;     // no output.weight: lm_head is the embedding
  std::optional<int64_t> bos_token_id;  // tokenizer.ggml.bos_token_id
  std::optional<int64_t> eos_token_id;  // tokenizer.ggml.eos_token_id
};

// Reads and cross-checks the hyperparameters (against each other and the tensor shapes).
// Throws naming the file and key for a non-llama file or inconsistent metadata.
LlamaHyperparams read_llama_hyperparams(const GgufFile& gguf);

// One HF tensor backed by one GGUF tensor. Cheap to hold: no data is converted until read.
struct HfTensorSource {
  std::string hf_name;           // "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;    // torch order: the GGUF ne reversed
  const GgufTensor* gguf = nullptr;
  int64_t unpermute_heads = 0;   // > 0: rows are q/k rows interleaved for RoPE over this many heads

  int64_t numel() const;
  int64_t row_length() const { return shape.back(); }  // elements per row (GGUF ne[0])
  int64_t rows() const { return numel() / row_length(); }
  // Dequantizes the whole tensor, in HF layout, into out (numel() floats).
  void read_f32(std::span<float> out) const;
  // Dequantizes HF rows [first_row, first_row + out.size() / row_length()) into out.
  void read_rows_f32(int64_t first_row, std::span<float> out) const;
};

// The HF tensors of a Llama GGUF file, in HF checkpoint order (embedding, each layer's norms,
// attention and MLP weights, final norm, lm_head when untied). Every GGUF tensor is accounted
// for: names kiln does not map, missing layer tensors and wrong shapes are errors naming them.
// The returned objects point into `gguf`, which must outlive them.
std::vector<HfTensorSource> llama_hf_tensors(const GgufFile& gguf, const LlamaHyperparams& hp);

// The GGUF row holding HF row `hf_row` of a q/k projection whose heads have `head_dim` rows.
// convert_hf_to_gguf's permute views the rows as (heads, 2, head_dim / 2) and swaps the last
// two axes, so HF row (h, s, i) was stored as GGUF row (h, i, s).
int64_t llama_gguf_row_of_hf_row(int64_t hf_row, int64_t head_dim);

}  // namespace kiln
