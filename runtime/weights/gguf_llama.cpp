#include "runtime/weights/gguf_llama.hpp"

#include <charconv>
#include <map>

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

int64_t positive_int(const GgufFile& gguf, const std::string& key) {
  const int64_t v = gguf.get_int(key);
  if (v <= 0) fail(gguf.origin(), ": metadata key \"", key, "\" = ", v, ", expected a positive integer");
  return v;
}

// The sizes a layer tensor's torch shape is made of (none: a 1-D tensor has no second).
enum class Dim { none, hidden, q_rows, kv_rows, intermediate };
// The heads over which convert_hf_to_gguf permuted a projection's rows for RoPE: q with n_head,
// k with n_head_kv.
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

LlamaHyperparams read_llama_hyperparams(const GgufFile& gguf) {
  const std::string& origin = gguf.origin();
  const std::string arch = gguf.get_string("general.architecture");
  if (arch != "llama") fail(origin, ": general.architecture is \"", arch, "\", expected \"llama\"");

  LlamaHyperparams hp;
  hp.hidden_size = positive_int(gguf, "llama.embedding_length");
  hp.num_hidden_layers = positive_int(gguf, "llama.block_count");
  hp.num_attention_heads = positive_int(gguf, "llama.attention.head_count");
  hp.num_key_value_heads = gguf.has("llama.attention.head_count_kv")
                               ? positive_int(gguf, "llama.attention.head_count_kv")
                               : hp.num_attention_heads;
  hp.intermediate_size = positive_int(gguf, "llama.feed_forward_length");
  hp.max_position_embeddings = positive_int(gguf, "llama.context_length");
  hp.rms_norm_eps = metadata_float(gguf, "llama.attention.layer_norm_rms_epsilon");
  if (!(hp.rms_norm_eps > 0)) fail(origin, ": llama.attention.layer_norm_rms_epsilon = ", hp.rms_norm_eps, ", expected > 0");
  if (gguf.has("llama.rope.freq_base")) hp.rope_theta = metadata_float(gguf, "llama.rope.freq_base");
  if (!(hp.rope_theta > 0)) fail(origin, ": llama.rope.freq_base = ", hp.rope_theta, ", expected > 0");

  if (hp.num_attention_heads % hp.num_key_value_heads != 0) {
    fail(origin, ": head_count ", hp.num_attention_heads, " is not a multiple of head_count_kv ", hp.num_key_value_heads);
  }
  if (gguf.has("llama.attention.key_length")) {
    hp.head_dim = positive_int(gguf, "llama.attention.key_length");
    if (gguf.has("llama.attention.value_length") && gguf.get_int("llama.attention.value_length") != hp.head_dim) {
      fail(origin, ": llama.attention.value_length ", gguf.get_int("llama.attention.value_length"),
           " differs from key_length ", hp.head_dim, " (Llama uses one head_dim)");
    }
  } else {
    if (hp.hidden_size % hp.num_attention_heads != 0) {
      fail(origin, ": embedding_length ", hp.hidden_size, " is not a multiple of head_count ", hp.num_attention_heads,
           " and llama.attention.key_length is absent");
    }
    hp.head_dim = hp.hidden_size / hp.num_attention_heads;
  }
  if (hp.head_dim % 2 != 0) fail(origin, ": head_dim ", hp.head_dim, " is odd; RoPE needs an even head_dim");
  if (gguf.has("llama.rope.dimension_count") && gguf.get_int("llama.rope.dimension_count") != hp.head_dim) {
    fail(origin, ": llama.rope.dimension_count ", gguf.get_int("llama.rope.dimension_count"), " differs from head_dim ",
         hp.head_dim, " (partial rotary embeddings are not Llama)");
  }

  if (gguf.has("llama.rope.scaling.type")) {
    const std::string type = gguf.get_string("llama.rope.scaling.type");
    if (type == "linear" || type == "yarn") {
      LlamaRopeScaling scaling;
      scaling.type = type;
      scaling.factor = metadata_float(gguf, "llama.rope.scaling.factor");
      if (gguf.has("llama.rope.scaling.original_context_length")) {
        scaling.original_max_position_embeddings = positive_int(gguf, "llama.rope.scaling.original_context_length");
      }
      hp.rope_scaling = scaling;
    } else if (type != "none") {
      fail(origin, ": llama.rope.scaling.type \"", type, "\" is not supported (expected none, linear or yarn)");
    }
  } else if (gguf.has("llama.rope.scaling.factor") && metadata_float(gguf, "llama.rope.scaling.factor") != 1.0) {
    // Older writers stored only the linear factor.
    hp.rope_scaling = LlamaRopeScaling{"linear", metadata_float(gguf, "llama.rope.scaling.factor"), std::nullopt};
  }

  const GgufTensor* embed = gguf.find_tensor("token_embd.weight");
  if (embed == nullptr) fail(origin, ": tensor \"token_embd.weight\" is missing");
  if (embed->ne.size() != 2) fail(origin, ": tensor \"token_embd.weight\" has ", embed->ne.size(), " dims, expected 2");
  if (gguf.has("llama.vocab_size")) {
    hp.vocab_size = positive_int(gguf, "llama.vocab_size");
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
  // GGUF rows are whole blocks (the parser checked ne[0] against the block size), so each row
  // dequantizes on its own.
  const size_t row_bytes = ggml_tensor_bytes(gguf->type, row_len);
  if (unpermute_heads == 0) {
    dequantize(gguf->type, gguf->bytes.subspan(static_cast<size_t>(first_row) * row_bytes, static_cast<size_t>(n_rows) * row_bytes),
               out);
    return;
  }
  const int64_t head_dim = rows() / unpermute_heads;
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t source = llama_gguf_row_of_hf_row(first_row + r, head_dim);
    dequantize(gguf->type, gguf->bytes.subspan(static_cast<size_t>(source) * row_bytes, row_bytes),
               out.subspan(static_cast<size_t>(r * row_len), static_cast<size_t>(row_len)));
  }
}

std::vector<HfTensorSource> llama_hf_tensors(const GgufFile& gguf, const LlamaHyperparams& hp) {
  const std::string& origin = gguf.origin();
  const int64_t q_rows = hp.num_attention_heads * hp.head_dim;
  const int64_t kv_rows = hp.num_key_value_heads * hp.head_dim;
  std::map<std::string, bool> used;  // GGUF names consumed; every tensor must be
  for (const GgufTensor& t : gguf.tensors()) used[t.name] = false;

  std::vector<HfTensorSource> out;
  const auto add = [&](const std::string& gguf_name, const std::string& hf_name, std::vector<int64_t> shape,
                       int64_t unpermute_heads) {
    const GgufTensor* t = gguf.find_tensor(gguf_name);
    if (t == nullptr) fail(origin, ": tensor \"", gguf_name, "\" (HF ", hf_name, ") is missing");
    const std::vector<int64_t> torch_shape(t->ne.rbegin(), t->ne.rend());
    if (torch_shape != shape) {
      fail(origin, ": tensor \"", gguf_name, "\" has torch shape ", shape_text(torch_shape), ", expected ",
           shape_text(shape), " from the metadata");
    }
    if (!can_dequantize(t->type)) {
      fail(origin, ": tensor \"", gguf_name, "\" is ", ggml_type_name(t->type),
           ", which kiln cannot dequantize (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K)");
    }
    used[gguf_name] = true;
    out.push_back({hf_name, std::move(shape), t, unpermute_heads});
  };

  const auto size = [&](Dim dim) -> int64_t {
    switch (dim) {
      case Dim::hidden: return hp.hidden_size;
      case Dim::q_rows: return q_rows;
      case Dim::kv_rows: return kv_rows;
      case Dim::intermediate: return hp.intermediate_size;
      case Dim::none: break;
    }
    return 0;
  };

  add("token_embd.weight", "model.embed_tokens.weight", {hp.vocab_size, hp.hidden_size}, 0);
  for (int64_t layer = 0; layer < hp.num_hidden_layers; ++layer) {
    const std::string g = "blk." + std::to_string(layer) + ".";
    const std::string h = "model.layers." + std::to_string(layer) + ".";
    for (const LayerTensor& lt : kLayerTensors) {
      std::vector<int64_t> shape{size(lt.rows)};
      if (lt.cols != Dim::none) shape.push_back(size(lt.cols));
      const int64_t heads = lt.permuted == RopePermuted::attention_heads ? hp.num_attention_heads
                            : lt.permuted == RopePermuted::kv_heads      ? hp.num_key_value_heads
                                                                         : 0;
      add(g + lt.gguf, h + lt.hf, std::move(shape), heads);
    }
  }
  add("output_norm.weight", "model.norm.weight", {hp.hidden_size}, 0);
  if (!hp.tie_word_embeddings) add("output.weight", "lm_head.weight", {hp.vocab_size, hp.hidden_size}, 0);
  // rope_freqs.weight holds Llama-3.1 RoPE factors: not an HF weight; hp.has_rope_freqs reports it.
  if (hp.has_rope_freqs) used["rope_freqs.weight"] = true;

  for (const auto& [name, consumed] : used) {
    if (!consumed) {
      fail(origin, ": tensor \"", name, "\" is not part of a ", hp.num_hidden_layers,
           "-layer Llama model as kiln maps it (unknown name or layer beyond llama.block_count)");
    }
  }
  return out;
}

}  // namespace kiln
