#include "runtime/weights/gguf_model.hpp"

#include <charconv>
#include <map>
#include <tuple>

#include "runtime/core/error.hpp"
#include "runtime/weights/dequant.hpp"
#include "runtime/weights/shape.hpp"

namespace kiln {
namespace {

// A float metadata value as the decimal its writer most likely meant: FLOAT32 values are widened
// via their shortest round-tripping decimal (1e-05f -> 1e-05, not 9.999999747378752e-06).
double metadata_float(const GgufFile& gguf, const std::string& key) {
  const GgufValue* v = gguf.find(key);
  const double value = gguf.get_float(key);
  if (v->type != GgufValueType::FLOAT32) return value;
  char text[32];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, static_cast<float>(value));
  double shortest = value;
  if (ec == std::errc()) std::from_chars(text, end, shortest);
  return shortest;
}

// Sizes read from a file are at most this (2^26: above any real vocabulary, context or width), so
// that products of two of them, as tensor shapes take, cannot overflow.
constexpr int64_t kMaxMetadataSize = int64_t{1} << 26;

int64_t positive_int(const GgufFile& gguf, const std::string& key) {
  const int64_t v = gguf.get_int(key);
  if (v <= 0 || v > kMaxMetadataSize) {
    fail(gguf.origin(), ": metadata key \"", key, "\" = ", v, ", expected a positive integer up to ", kMaxMetadataSize);
  }
  return v;
}

// The sizes a layer tensor's torch shape is made of (none: a 1-D tensor has no second).
enum class Dim { none, hidden, q_rows, kv_rows, intermediate, head_dim };
// The heads over which convert_hf_to_gguf permuted a projection's rows for RoPE (llama only): q
// with n_head, k with n_head_kv.
enum class RopePermuted { no, attention_heads, kv_heads };

// Per-layer GGUF tensor suffix -> HF name suffix and torch shape, in HF checkpoint order.
struct LayerTensor {
  const char* gguf;
  const char* hf;
  Dim rows, cols;
  RopePermuted permuted;
};
constexpr LayerTensor kLayerTensors[] = {
    {"attn_norm.weight", "input_layernorm.weight", Dim::hidden, Dim::none, RopePermuted::no},
    {"attn_q.weight", "self_attn.q_proj.weight", Dim::q_rows, Dim::hidden, RopePermuted::attention_heads},
    {"attn_k.weight", "self_attn.k_proj.weight", Dim::kv_rows, Dim::hidden, RopePermuted::kv_heads},
    {"attn_v.weight", "self_attn.v_proj.weight", Dim::kv_rows, Dim::hidden, RopePermuted::no},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", Dim::head_dim, Dim::none, RopePermuted::no},  // qk_norm only
    {"attn_k_norm.weight", "self_attn.k_norm.weight", Dim::head_dim, Dim::none, RopePermuted::no},  // qk_norm only
    {"attn_output.weight", "self_attn.o_proj.weight", Dim::hidden, Dim::q_rows, RopePermuted::no},
    {"ffn_norm.weight", "post_attention_layernorm.weight", Dim::hidden, Dim::none, RopePermuted::no},
    {"ffn_gate.weight", "mlp.gate_proj.weight", Dim::intermediate, Dim::hidden, RopePermuted::no},
    {"ffn_up.weight", "mlp.up_proj.weight", Dim::intermediate, Dim::hidden, RopePermuted::no},
    {"ffn_down.weight", "mlp.down_proj.weight", Dim::hidden, Dim::intermediate, RopePermuted::no},
};

}  // namespace

int64_t llama_gguf_row_of_hf_row(int64_t hf_row, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  const int64_t head = hf_row / head_dim;
  const int64_t within = hf_row % head_dim;
  const int64_t s = within / half;  // which half of the head (0: first, 1: second)
  const int64_t i = within % half;  // position within the half
  return head * head_dim + 2 * i + s;
}

namespace {

// Llama / Qwen3 attention: one head_dim for keys and values, all of it rotated.
void read_dense_heads(const GgufFile& gguf, GgufHyperparams& hp) {
  const std::string& origin = gguf.origin();
  const std::string& arch = hp.architecture;
  const auto key = [&](const char* suffix) { return arch + "." + suffix; };
  if (hp.num_attention_heads % hp.num_key_value_heads != 0) {
    fail(origin, ": head_count ", hp.num_attention_heads, " is not a multiple of head_count_kv ", hp.num_key_value_heads);
  }
  if (gguf.has(key("attention.key_length"))) {
    hp.head_dim = positive_int(gguf, key("attention.key_length"));
    if (gguf.has(key("attention.value_length")) && gguf.get_int(key("attention.value_length")) != hp.head_dim) {
      fail(origin, ": ", key("attention.value_length"), " ", gguf.get_int(key("attention.value_length")),
           " differs from key_length ", hp.head_dim, " (", arch, " uses one head_dim)");
    }
  } else {
    if (hp.hidden_size % hp.num_attention_heads != 0) {
      fail(origin, ": embedding_length ", hp.hidden_size, " is not a multiple of head_count ", hp.num_attention_heads,
           " and ", key("attention.key_length"), " is absent");
    }
    hp.head_dim = hp.hidden_size / hp.num_attention_heads;
  }
  if (hp.head_dim % 2 != 0) fail(origin, ": head_dim ", hp.head_dim, " is odd; RoPE needs an even head_dim");
  if (gguf.has(key("rope.dimension_count")) && gguf.get_int(key("rope.dimension_count")) != hp.head_dim) {
    fail(origin, ": ", key("rope.dimension_count"), " ", gguf.get_int(key("rope.dimension_count")), " differs from head_dim ",
         hp.head_dim, " (partial rotary embeddings are not ", arch, ")");
  }
}

// DeepSeek-V2: MLA (llama.cpp stores it as MQA over the latent: head_count_kv 1, key_length
// kv_lora + rope, value_length kv_lora; the per-head sizes in key_length_mla / value_length_mla) and
// DeepSeekMoE. Files converted before llama.cpp split kv_b give the per-head sizes in key_length /
// value_length and head_count_kv = head_count.
void read_deepseek2(const GgufFile& gguf, GgufHyperparams& hp) {
  const std::string& origin = gguf.origin();
  const auto key = [&](const char* suffix) { return hp.architecture + "." + suffix; };
  const auto count_or = [&](const char* suffix, int64_t fallback) {  // a count that may be 0
    if (!gguf.has(key(suffix))) return fallback;
    const int64_t v = gguf.get_int(key(suffix));
    if (v < 0 || v > kMaxMetadataSize) {
      fail(origin, ": metadata key \"", key(suffix), "\" = ", v, ", expected 0 to ", kMaxMetadataSize);
    }
    return v;
  };
  GgufMla mla;
  if (gguf.has(key("attention.q_lora_rank"))) mla.q_lora_rank = positive_int(gguf, key("attention.q_lora_rank"));
  mla.kv_lora_rank = positive_int(gguf, key("attention.kv_lora_rank"));
  mla.qk_rope_head_dim = positive_int(gguf, key("rope.dimension_count"));
  const bool split = gguf.has(key("attention.key_length_mla"));
  const int64_t qk_head_dim = positive_int(gguf, key(split ? "attention.key_length_mla" : "attention.key_length"));
  mla.v_head_dim = positive_int(gguf, key(split ? "attention.value_length_mla" : "attention.value_length"));
  mla.qk_nope_head_dim = qk_head_dim - mla.qk_rope_head_dim;
  if (mla.qk_nope_head_dim <= 0) {
    fail(origin, ": key length ", qk_head_dim, " leaves no non-rotary part after ", key("rope.dimension_count"), " ",
         mla.qk_rope_head_dim);
  }
  if (mla.qk_rope_head_dim % 2 != 0) fail(origin, ": ", key("rope.dimension_count"), " ", mla.qk_rope_head_dim, " is odd");
  hp.mla = mla;
  hp.num_key_value_heads = hp.num_attention_heads;  // HF's DeepSeek-V2 config: as many as the query heads
  hp.head_dim = 0;                                  // MLA has no single head_dim

  GgufMoe moe;
  moe.n_routed_experts = positive_int(gguf, key("expert_count"));
  moe.num_experts_per_tok = positive_int(gguf, key("expert_used_count"));
  moe.n_shared_experts = count_or("expert_shared_count", 0);
  moe.moe_intermediate_size = positive_int(gguf, key("expert_feed_forward_length"));
  moe.first_k_dense_replace = count_or("leading_dense_block_count", 0);
  if (gguf.has(key("expert_group_count"))) moe.n_group = positive_int(gguf, key("expert_group_count"));
  if (gguf.has(key("expert_group_used_count"))) moe.topk_group = positive_int(gguf, key("expert_group_used_count"));
  if (gguf.has(key("expert_weights_scale"))) moe.routed_scaling_factor = metadata_float(gguf, key("expert_weights_scale"));
  if (gguf.has(key("expert_weights_norm"))) moe.norm_topk_prob = gguf.get_bool(key("expert_weights_norm"));
  if (gguf.has(key("expert_gating_func")) && gguf.get_int(key("expert_gating_func")) != 1) {
    fail(origin, ": ", key("expert_gating_func"), " is ", gguf.get_int(key("expert_gating_func")),
         "; DeepSeek-V2 routes with softmax (1)");
  }
  const int64_t groups = moe.n_group.value_or(1), groups_used = moe.topk_group.value_or(groups);
  if (moe.num_experts_per_tok > moe.n_routed_experts || moe.first_k_dense_replace > hp.num_hidden_layers ||
      groups_used > groups || moe.n_routed_experts % groups != 0) {
    fail(origin, ": inconsistent expert metadata (", moe.n_routed_experts, " experts, ", moe.num_experts_per_tok,
         " used, ", groups, " groups of which ", groups_used, " used, ", moe.first_k_dense_replace,
         " leading dense blocks of ", hp.num_hidden_layers, ")");
  }
  hp.moe = moe;
}

}  // namespace

GgufHyperparams read_gguf_hyperparams(const GgufFile& gguf) {
  const std::string& origin = gguf.origin();
  GgufHyperparams hp;
  hp.architecture = gguf.get_string("general.architecture");
  if (hp.architecture == "llama") {
    hp.model_type = "llama";
    hp.rope_permuted = true;
  } else if (hp.architecture == "qwen3") {
    hp.model_type = "qwen3";
    hp.qk_norm = true;
  } else if (hp.architecture == "deepseek2") {
    hp.model_type = "deepseek_v2";
  } else {
    fail(origin, ": general.architecture is \"", hp.architecture, "\"; kiln reads GGUF files of the architectures "
         "\"llama\" (Llama, SmolLM2), \"qwen3\" and \"deepseek2\" (DeepSeek-V2)",
         hp.architecture == "qwen2" ? " (Qwen2 has q/k/v biases and no kiln family)" : "");
  }
  const std::string& arch = hp.architecture;
  const auto key = [&](const char* suffix) { return arch + "." + suffix; };
  hp.hidden_size = positive_int(gguf, key("embedding_length"));
  hp.num_hidden_layers = positive_int(gguf, key("block_count"));
  hp.num_attention_heads = positive_int(gguf, key("attention.head_count"));
  hp.num_key_value_heads = gguf.has(key("attention.head_count_kv"))
                               ? positive_int(gguf, key("attention.head_count_kv"))
                               : hp.num_attention_heads;
  hp.intermediate_size = positive_int(gguf, key("feed_forward_length"));
  hp.max_position_embeddings = positive_int(gguf, key("context_length"));
  hp.rms_norm_eps = metadata_float(gguf, key("attention.layer_norm_rms_epsilon"));
  if (!(hp.rms_norm_eps > 0)) fail(origin, ": ", key("attention.layer_norm_rms_epsilon"), " = ", hp.rms_norm_eps, ", expected > 0");
  if (gguf.has(key("rope.freq_base"))) hp.rope_theta = metadata_float(gguf, key("rope.freq_base"));
  if (!(hp.rope_theta > 0)) fail(origin, ": ", key("rope.freq_base"), " = ", hp.rope_theta, ", expected > 0");

  if (hp.architecture == "deepseek2") {
    read_deepseek2(gguf, hp);
  } else {
    read_dense_heads(gguf, hp);
  }

  if (gguf.has(key("rope.scaling.type"))) {
    const std::string type = gguf.get_string(key("rope.scaling.type"));
    if (type == "linear" || type == "yarn") {
      GgufRopeScaling scaling;
      scaling.type = type;
      scaling.factor = metadata_float(gguf, key("rope.scaling.factor"));
      if (gguf.has(key("rope.scaling.original_context_length"))) {
        scaling.original_max_position_embeddings = positive_int(gguf, key("rope.scaling.original_context_length"));
      }
      if (gguf.has(key("rope.scaling.yarn_beta_fast"))) scaling.beta_fast = metadata_float(gguf, key("rope.scaling.yarn_beta_fast"));
      if (gguf.has(key("rope.scaling.yarn_beta_slow"))) scaling.beta_slow = metadata_float(gguf, key("rope.scaling.yarn_beta_slow"));
      if (gguf.has(key("rope.scaling.yarn_log_multiplier"))) {
        // convert_hf_to_gguf writes 0.1 × mscale_all_dim for deepseek2 (its "legacy" convention).
        scaling.mscale_all_dim = metadata_float(gguf, key("rope.scaling.yarn_log_multiplier")) / 0.1;
      }
      hp.rope_scaling = scaling;
    } else if (type != "none") {
      fail(origin, ": ", key("rope.scaling.type"), " \"", type, "\" is not supported (expected none, linear or yarn)");
    }
  } else if (gguf.has(key("rope.scaling.factor")) && metadata_float(gguf, key("rope.scaling.factor")) != 1.0) {
    // Older writers stored only the linear factor.
    hp.rope_scaling = GgufRopeScaling{"linear", metadata_float(gguf, key("rope.scaling.factor")), std::nullopt};
  }

  const GgufTensor* embed = gguf.find_tensor("token_embd.weight");
  if (embed == nullptr) fail(origin, ": tensor \"token_embd.weight\" is missing");
  if (embed->ne.size() != 2) fail(origin, ": tensor \"token_embd.weight\" has ", embed->ne.size(), " dims, expected 2");
  if (gguf.has(key("vocab_size"))) {
    hp.vocab_size = positive_int(gguf, key("vocab_size"));
  } else if (gguf.has("tokenizer.ggml.tokens")) {
    hp.vocab_size = static_cast<int64_t>(gguf.find("tokenizer.ggml.tokens")->array_size());
  } else {
    hp.vocab_size = embed->ne[1];
  }
  if (embed->ne[1] != hp.vocab_size) {
    fail(origin, ": token_embd.weight has ", embed->ne[1], " rows but the vocabulary has ", hp.vocab_size, " tokens");
  }
  hp.tie_word_embeddings = gguf.find_tensor("output.weight") == nullptr;
  hp.has_rope_freqs = gguf.find_tensor("rope_freqs.weight") != nullptr;
  if (gguf.has("tokenizer.ggml.bos_token_id")) hp.bos_token_id = gguf.get_int("tokenizer.ggml.bos_token_id");
  if (gguf.has("tokenizer.ggml.eos_token_id")) hp.eos_token_id = gguf.get_int("tokenizer.ggml.eos_token_id");
  return hp;
}

int64_t HfTensorSource::numel() const { return element_count(shape); }

void HfTensorSource::read_f32(std::span<float> out) const {
  if (static_cast<int64_t>(out.size()) != numel()) {
    fail(hf_name, ": output has ", out.size(), " elements, the tensor has ", numel());
  }
  read_rows_f32(0, out);
}

void HfTensorSource::read_rows_f32(int64_t first_row, std::span<float> out) const {
  const int64_t row_len = row_length();
  const int64_t n_rows = static_cast<int64_t>(out.size()) / row_len;
  if (static_cast<int64_t>(out.size()) % row_len != 0 || first_row < 0 || first_row + n_rows > rows()) {
    fail(hf_name, ": cannot read ", out.size(), " elements from row ", first_row, " (", rows(), " rows of ", row_len,
         " elements)");
  }
  if (k_b != nullptr) return read_split_kv_b_rows(first_row, out);
  // GGUF rows are whole blocks (the parser checked ne[0] against the block size), so each row
  // dequantizes on its own.
  const size_t row_bytes = ggml_tensor_bytes(gguf->type, row_len);
  const auto gguf_rows = [&](int64_t row, int64_t count) {
    return gguf->bytes.subspan(static_cast<size_t>(first_gguf_row + row) * row_bytes, static_cast<size_t>(count) * row_bytes);
  };
  if (unpermute_heads == 0) {
    dequantize(gguf->type, gguf_rows(first_row, n_rows), out);
    return;
  }
  const int64_t head_dim = rows() / unpermute_heads;
  for (int64_t r = 0; r < n_rows; ++r) {
    dequantize(gguf->type, gguf_rows(llama_gguf_row_of_hf_row(first_row + r, head_dim), 1),
               out.subspan(static_cast<size_t>(r * row_len), static_cast<size_t>(row_len)));
  }
}

std::span<const std::byte> HfTensorSource::stored_row(int64_t hf_row) const {
  if (k_b != nullptr) return {};
  if (hf_row < 0 || hf_row >= rows()) fail(hf_name, ": no row ", hf_row, " (", rows(), " rows)");
  const size_t row_bytes = ggml_tensor_bytes(gguf->type, row_length());
  const int64_t row = unpermute_heads == 0 ? hf_row : llama_gguf_row_of_hf_row(hf_row, rows() / unpermute_heads);
  return gguf->bytes.subspan(static_cast<size_t>(first_gguf_row + row) * row_bytes, row_bytes);
}

void HfTensorSource::read_split_kv_b_rows(int64_t first_row, std::span<float> out) const {
  const int64_t kv_lora = row_length(), nope = k_b_nope;
  const int64_t v_dim = gguf->ne[1], per_head = nope + v_dim;
  const size_t k_row_bytes = ggml_tensor_bytes(k_b->type, nope), v_row_bytes = ggml_tensor_bytes(gguf->type, kv_lora);
  std::vector<float> k_head;  // one head of k_b, [kv_lora, nope], dequantized when a key row needs it
  int64_t k_head_index = -1;
  for (int64_t r = 0; r < static_cast<int64_t>(out.size()) / kv_lora; ++r) {
    const int64_t row = first_row + r, head = row / per_head, within = row % per_head;
    float* dst = out.data() + r * kv_lora;
    if (within >= nope) {  // a value row: v_b's row as stored
      dequantize(gguf->type, gguf->bytes.subspan(static_cast<size_t>(head * v_dim + within - nope) * v_row_bytes, v_row_bytes),
                 std::span<float>(dst, static_cast<size_t>(kv_lora)));
      continue;
    }
    if (k_head_index != head) {  // a key row is column `within` of the head's [kv_lora, nope] block
      k_head.resize(static_cast<size_t>(kv_lora * nope));
      dequantize(k_b->type, k_b->bytes.subspan(static_cast<size_t>(head * kv_lora) * k_row_bytes, static_cast<size_t>(kv_lora) * k_row_bytes),
                 k_head);
      k_head_index = head;
    }
    for (int64_t j = 0; j < kv_lora; ++j) dst[j] = k_head[static_cast<size_t>(j * nope + within)];
  }
}

namespace {

// DeepSeek-V2's layer tensors (llama.cpp's names) under HF names: MLA projections, then a dense MLP
// (leading layers) or the router, routed experts (stacked in GGUF, one HF tensor per expert) and
// shared experts.
template <typename Take, typename Add>
void add_deepseek2_layers(const GgufFile& gguf, const GgufHyperparams& hp, const Take& take, const Add& add,
                          std::vector<HfTensorSource>& out) {
  const GgufMla& mla = *hp.mla;
  const GgufMoe& moe = *hp.moe;
  const int64_t H = hp.hidden_size, heads = hp.num_attention_heads;
  const int64_t qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim, kv_lora = mla.kv_lora_rank;
  const int64_t shared = moe.moe_intermediate_size * moe.n_shared_experts;
  for (int64_t layer = 0; layer < hp.num_hidden_layers; ++layer) {
    const std::string g = "blk." + std::to_string(layer) + ".";
    const std::string h = "model.layers." + std::to_string(layer) + ".";
    add(g + "attn_norm.weight", h + "input_layernorm.weight", {H}, 0);
    if (mla.q_lora_rank) {
      add(g + "attn_q_a.weight", h + "self_attn.q_a_proj.weight", {*mla.q_lora_rank, H}, 0);
      add(g + "attn_q_a_norm.weight", h + "self_attn.q_a_layernorm.weight", {*mla.q_lora_rank}, 0);
      add(g + "attn_q_b.weight", h + "self_attn.q_b_proj.weight", {heads * qk, *mla.q_lora_rank}, 0);
    } else {
      add(g + "attn_q.weight", h + "self_attn.q_proj.weight", {heads * qk, H}, 0);
    }
    add(g + "attn_kv_a_mqa.weight", h + "self_attn.kv_a_proj_with_mqa.weight", {kv_lora + mla.qk_rope_head_dim, H}, 0);
    add(g + "attn_kv_a_norm.weight", h + "self_attn.kv_a_layernorm.weight", {kv_lora}, 0);
    const std::string kv_b = h + "self_attn.kv_b_proj.weight";
    const std::vector<int64_t> kv_b_shape{heads * (mla.qk_nope_head_dim + mla.v_head_dim), kv_lora};
    if (gguf.find_tensor(g + "attn_k_b.weight") != nullptr) {
      // llama.cpp's split for absorbed attention: k_b per head transposed, v_b as is.
      const GgufTensor* k_b = take(g + "attn_k_b.weight", kv_b, {heads, kv_lora, mla.qk_nope_head_dim});
      const GgufTensor* v_b = take(g + "attn_v_b.weight", kv_b, {heads, mla.v_head_dim, kv_lora});
      HfTensorSource t{kv_b, kv_b_shape, v_b};
      t.k_b = k_b;
      t.k_b_nope = mla.qk_nope_head_dim;
      out.push_back(std::move(t));
    } else {
      add(g + "attn_kv_b.weight", kv_b, kv_b_shape, 0);
    }
    add(g + "attn_output.weight", h + "self_attn.o_proj.weight", {H, heads * mla.v_head_dim}, 0);
    add(g + "ffn_norm.weight", h + "post_attention_layernorm.weight", {H}, 0);
    if (layer < moe.first_k_dense_replace) {
      add(g + "ffn_gate.weight", h + "mlp.gate_proj.weight", {hp.intermediate_size, H}, 0);
      add(g + "ffn_up.weight", h + "mlp.up_proj.weight", {hp.intermediate_size, H}, 0);
      add(g + "ffn_down.weight", h + "mlp.down_proj.weight", {H, hp.intermediate_size}, 0);
      continue;
    }
    add(g + "ffn_gate_inp.weight", h + "mlp.gate.weight", {moe.n_routed_experts, H}, 0);
    const int64_t E = moe.n_routed_experts, I = moe.moe_intermediate_size;
    for (const auto& [stacked, proj, rows, cols] : {std::tuple{"ffn_gate_exps", "gate_proj", I, H},
                                                    std::tuple{"ffn_up_exps", "up_proj", I, H},
                                                    std::tuple{"ffn_down_exps", "down_proj", H, I}}) {
      const GgufTensor* t = take(g + stacked + ".weight", h + "mlp.experts.{E}." + proj + ".weight", {E, rows, cols});
      for (int64_t e = 0; e < E; ++e) {
        HfTensorSource piece{h + "mlp.experts." + std::to_string(e) + "." + proj + ".weight", {rows, cols}, t};
        piece.first_gguf_row = e * rows;
        out.push_back(std::move(piece));
      }
    }
    if (shared > 0) {
      add(g + "ffn_gate_shexp.weight", h + "mlp.shared_experts.gate_proj.weight", {shared, H}, 0);
      add(g + "ffn_up_shexp.weight", h + "mlp.shared_experts.up_proj.weight", {shared, H}, 0);
      add(g + "ffn_down_shexp.weight", h + "mlp.shared_experts.down_proj.weight", {H, shared}, 0);
    }
  }
}

// Llama / Qwen3 layer tensors (kLayerTensors), llama's q/k rows un-permuted.
template <typename Add>
void add_dense_layers(const GgufHyperparams& hp, const Add& add) {
  const auto size = [&](Dim dim) -> int64_t {
    switch (dim) {
      case Dim::hidden: return hp.hidden_size;
      case Dim::q_rows: return hp.num_attention_heads * hp.head_dim;
      case Dim::kv_rows: return hp.num_key_value_heads * hp.head_dim;
      case Dim::intermediate: return hp.intermediate_size;
      case Dim::head_dim: return hp.head_dim;
      case Dim::none: break;
    }
    return 0;
  };
  for (int64_t layer = 0; layer < hp.num_hidden_layers; ++layer) {
    const std::string g = "blk." + std::to_string(layer) + ".";
    const std::string h = "model.layers." + std::to_string(layer) + ".";
    for (const LayerTensor& lt : kLayerTensors) {
      if (lt.rows == Dim::head_dim && !hp.qk_norm) continue;
      std::vector<int64_t> shape{size(lt.rows)};
      if (lt.cols != Dim::none) shape.push_back(size(lt.cols));
      const RopePermuted permuted = hp.rope_permuted ? lt.permuted : RopePermuted::no;
      const int64_t heads = permuted == RopePermuted::attention_heads ? hp.num_attention_heads
                            : permuted == RopePermuted::kv_heads      ? hp.num_key_value_heads
                                                                      : 0;
      add(g + lt.gguf, h + lt.hf, std::move(shape), heads);
    }
  }
}

}  // namespace

std::vector<HfTensorSource> gguf_hf_tensors(const GgufFile& gguf, const GgufHyperparams& hp) {
  const std::string& origin = gguf.origin();
  std::map<std::string, bool> used;  // GGUF names consumed; every tensor must be
  for (const GgufTensor& t : gguf.tensors()) used[t.name] = false;

  std::vector<HfTensorSource> out;
  // The GGUF tensor `gguf_name` (which HF's `hf_name` comes from), checked against its expected torch
  // shape and marked used.
  const auto take = [&](const std::string& gguf_name, const std::string& hf_name, const std::vector<int64_t>& shape) {
    const GgufTensor* t = gguf.find_tensor(gguf_name);
    if (t == nullptr) fail(origin, ": tensor \"", gguf_name, "\" (HF ", hf_name, ") is missing");
    const std::vector<int64_t> torch_shape(t->ne.rbegin(), t->ne.rend());
    if (torch_shape != shape) {
      fail(origin, ": tensor \"", gguf_name, "\" has torch shape ", shape_text(torch_shape), ", expected ",
           shape_text(shape), " from the metadata");
    }
    if (!can_dequantize(t->type)) {
      fail(origin, ": tensor \"", gguf_name, "\" is ", ggml_type_name(t->type),
           ", which kiln cannot read (it reads ", dequantizable_type_names(),
           "; requantize the file with llama-quantize to one of those, e.g. Q4_K_M)");
    }
    used[gguf_name] = true;
    return t;
  };
  const auto add = [&](const std::string& gguf_name, const std::string& hf_name, std::vector<int64_t> shape,
                       int64_t unpermute_heads) {
    const GgufTensor* t = take(gguf_name, hf_name, shape);
    out.push_back({hf_name, std::move(shape), t, unpermute_heads});
  };

  add("token_embd.weight", "model.embed_tokens.weight", {hp.vocab_size, hp.hidden_size}, 0);
  if (hp.mla) {
    add_deepseek2_layers(gguf, hp, take, add, out);
  } else {
    add_dense_layers(hp, add);
  }
  add("output_norm.weight", "model.norm.weight", {hp.hidden_size}, 0);
  if (!hp.tie_word_embeddings) add("output.weight", "lm_head.weight", {hp.vocab_size, hp.hidden_size}, 0);
  // rope_freqs.weight holds Llama-3.1 RoPE factors: not an HF weight; hp.has_rope_freqs reports it.
  if (hp.has_rope_freqs) used["rope_freqs.weight"] = true;

  for (const auto& [name, consumed] : used) {
    if (!consumed) {
      fail(origin, ": tensor \"", name, "\" is not part of a ", hp.num_hidden_layers, "-layer ", hp.architecture,
           " model as kiln maps it (unknown name or layer beyond ", hp.architecture, ".block_count)");
    }
  }
  return out;
}

}  // namespace kiln
