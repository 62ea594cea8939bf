// TensorSource over a GGUF file of the llama, qwen3 or deepseek2 architecture (gguf_model.hpp
// maps the names, dequantizes and undoes llama.cpp's q/k row permutation).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string_view>

#include "codegen/architecture_fields.hpp"

#include "runtime/core/error.hpp"
#include "runtime/model/gguf_source.hpp"
#include "runtime/model/rope_table.hpp"
#include "runtime/weights/dequant.hpp"
#include "runtime/weights/gguf_model.hpp"

namespace kiln {

namespace {

// One architecture field a GGUF file states, as HF's config names it (ModelInfo::config_fields).
struct FileField {
  const char* hf;     // "vocab_size"
  const char* label;  // "vocabulary size", for the message
  std::string key;    // where the file says it: "llama.vocab_size"
  std::string value;  // as config_fields writes values: integers, names, true/false; reals compared numerically
  bool real = false;
};

std::string real_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

// What the file states of the fields config_fields lists. Fields GGUF cannot state are left out:
// max_position_embeddings (no computation depends on it), Llama 3.1's rope parameters (checked as
// rope_freqs.weight), YaRN's mscale (llama.cpp takes it equal to mscale_all_dim).
std::vector<FileField> file_fields(const GgufHyperparams& hp) {
  const std::string a = hp.architecture + ".";
  std::vector<FileField> f;
  const auto integer = [&](const char* hf, const char* label, const std::string& key, int64_t v) {
    f.push_back({hf, label, key, std::to_string(v), false});
  };
  const auto real = [&](const char* hf, const char* label, const std::string& key, double v) {
    f.push_back({hf, label, key, real_text(v), true});
  };
  const auto boolean = [&](const char* hf, const char* label, const std::string& key, bool v) {
    f.push_back({hf, label, key, v ? "true" : "false", false});
  };
  f.push_back({"model_type", "model type", "general.architecture", hp.model_type, false});
  integer("vocab_size", "vocabulary size", a + "vocab_size", hp.vocab_size);
  integer("hidden_size", "hidden size", a + "embedding_length", hp.hidden_size);
  integer("num_hidden_layers", "layer count", a + "block_count", hp.num_hidden_layers);
  integer("num_attention_heads", "attention heads", a + "attention.head_count", hp.num_attention_heads);
  if (!hp.mla) {
    integer("num_key_value_heads", "KV heads", a + "attention.head_count_kv", hp.num_key_value_heads);
    integer("head_dim", "head dim", a + "attention.key_length", hp.head_dim);
  }
  integer("intermediate_size", "intermediate size", a + "feed_forward_length", hp.intermediate_size);
  real("rms_norm_eps", "RMSNorm epsilon", a + "attention.layer_norm_rms_epsilon", hp.rms_norm_eps);
  boolean("tie_word_embeddings", "tied embeddings", "output.weight (absent: tied)", hp.tie_word_embeddings);
  real("rope_theta", "rope theta", a + "rope.freq_base", hp.rope_theta);
  const std::string scaling = a + "rope.scaling.";
  if (hp.rope_scaling) {
    const GgufRopeScaling& r = *hp.rope_scaling;
    f.push_back({"rope_type", "rope scaling", scaling + "type", r.type, false});
    real("factor", "rope scaling factor", scaling + "factor", r.factor);
    if (r.original_max_position_embeddings) {
      integer("original_max_position_embeddings", "rope scaling's original context", scaling + "original_context_length",
              *r.original_max_position_embeddings);
    }
    if (r.beta_fast) real("beta_fast", "YaRN beta_fast", scaling + "yarn_beta_fast", *r.beta_fast);
    if (r.beta_slow) real("beta_slow", "YaRN beta_slow", scaling + "yarn_beta_slow", *r.beta_slow);
    if (r.mscale_all_dim) real("mscale_all_dim", "YaRN mscale_all_dim", scaling + "yarn_log_multiplier", *r.mscale_all_dim);
  } else if (!hp.has_rope_freqs) {
    f.push_back({"rope_type", "rope scaling", scaling + "type and rope_freqs.weight (both absent)", "default", false});
  }
  if (hp.mla) {
    const GgufMla& m = *hp.mla;
    integer("q_lora_rank", "q LoRA rank", a + "attention.q_lora_rank (absent: 0)", m.q_lora_rank.value_or(0));
    integer("kv_lora_rank", "KV LoRA rank", a + "attention.kv_lora_rank", m.kv_lora_rank);
    integer("qk_nope_head_dim", "non-rotary key dim", a + "attention.key_length_mla - rope.dimension_count",
            m.qk_nope_head_dim);
    integer("qk_rope_head_dim", "rotary key dim", a + "rope.dimension_count", m.qk_rope_head_dim);
    integer("v_head_dim", "value head dim", a + "attention.value_length_mla", m.v_head_dim);
  }
  if (hp.moe) {
    const GgufMoe& m = *hp.moe;
    integer("n_routed_experts", "routed experts", a + "expert_count", m.n_routed_experts);
    integer("n_shared_experts", "shared experts", a + "expert_shared_count", m.n_shared_experts);
    integer("num_experts_per_tok", "experts per token", a + "expert_used_count", m.num_experts_per_tok);
    integer("moe_intermediate_size", "expert intermediate size", a + "expert_feed_forward_length", m.moe_intermediate_size);
    integer("first_k_dense_replace", "leading dense layers", a + "leading_dense_block_count", m.first_k_dense_replace);
    if (m.n_group) {
      integer("n_group", "expert groups", a + "expert_group_count", *m.n_group);
      f.push_back({"topk_method", "routing", a + "expert_group_count", *m.n_group > 1 ? "group_limited_greedy" : "greedy",
                   false});
    }
    if (m.topk_group) integer("topk_group", "expert groups used", a + "expert_group_used_count", *m.topk_group);
    boolean("norm_topk_prob", "normalized expert weights", a + "expert_weights_norm", m.norm_topk_prob);
    real("routed_scaling_factor", "routed scaling factor", a + "expert_weights_scale", m.routed_scaling_factor);
  }
  return f;
}

// A GGUF file made for another model (or another size) must not load as garbage: every field the
// file states is compared with the config the binary was generated from, as a model directory's
// config.json is (model_config_check.hpp).
void check_hyperparameters(const std::string& path, const GgufHyperparams& hp, const ModelInfo& m) {
  for (const FileField& f : file_fields(hp)) {
    const auto want = std::find_if(m.config_fields.begin(), m.config_fields.end(),
                                   [&](const ConfigField& c) { return f.hf == std::string_view(c.name); });
    if (want == m.config_fields.end()) continue;  // the binary's family has no such field
    const codegen::ArchitectureField file{f.hf, f.value, f.real}, binary{want->name, want->value, want->real};
    if (!codegen::same_value(file, binary)) {
      fail(path, ": ", f.label, " is ", f.value, " in the GGUF file but ", want->value, " in ", m.name, " (", f.key,
           " vs HF's ", f.hf, "; ", m.name, " was generated from ", m.source, ")");
    }
  }
}

// Llama 3.1's frequency scaling: the file holds, per rotary frequency, the divisor llama.cpp applies
// to theta's frequency (rope_freqs.weight); the binary's scaled frequencies must be those.
void check_rope_freqs(const GgufFile& file, const ModelInfo& m) {
  const std::string& path = file.origin();
  const GgufTensor* t = file.find_tensor("rope_freqs.weight");
  if (t == nullptr) return;  // then the file has no llama3 scaling, which check_hyperparameters compared
  if (m.rope.kind != RopeKind::llama3) {
    fail(path, ": rope_freqs.weight scales rope frequencies the Llama 3.1 way, but ", m.name, " does not");
  }
  const std::vector<float> want = rope_freq_divisors(m.rope);
  if (t->ne.size() != 1 || t->ne[0] != static_cast<int64_t>(want.size())) {
    fail(path, ": rope_freqs.weight should hold ", want.size(), " factors (rotary dim / 2)");
  }
  std::vector<float> divisors(want.size());
  dequantize(t->type, t->bytes, divisors);
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::fabs(divisors[i] - want[i]) <= 1e-4f * want[i])) {
      fail(path, ": rope_freqs.weight[", i, "] = ", divisors[i], ", but ", m.name, " divides that frequency by ", want[i],
           " (another rope_scaling: factor, low/high_freq_factor or original_max_position_embeddings)");
    }
  }
}

class GgufSource final : public TensorSource {
 public:
  GgufSource(std::shared_ptr<const GgufFile> file, const ModelInfo& model) : file_(std::move(file)) {
    const GgufHyperparams hp = read_gguf_hyperparams(*file_);  // rejects architectures kiln does not read
    check_hyperparameters(file_->origin(), hp, model);
    check_rope_freqs(*file_, model);
    for (HfTensorSource& t : gguf_hf_tensors(*file_, hp)) {
      const std::string name = t.hf_name;
      tensors_.emplace(name, std::move(t));
    }
  }

  std::string describe() const override { return "GGUF file " + file_->origin(); }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [name, t] : tensors_) out.push_back(name);
    return out;
  }
  std::optional<std::vector<int64_t>> shape(const std::string& name) const override {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) return std::nullopt;
    return it->second.shape;
  }
  void read_rows(const std::string& name, int64_t first, int64_t count, float* out) const override {
    const HfTensorSource& t = tensor(name);
    t.read_rows_f32(first, std::span<float>(out, static_cast<size_t>(count * t.row_length())));
  }
  // A BF16 tensor's rows straight from the mapping, where the file keeps HF's row order (not
  // llama's permuted q/k rows, not a split kv_b).
  const uint16_t* bf16_rows(const std::string& name, int64_t first) const override {
    const HfTensorSource& t = tensor(name);
    if (t.gguf->type != GgmlType::BF16 || t.k_b != nullptr || t.unpermute_heads != 0) return nullptr;
    if (first < 0 || first > t.rows()) fail(describe(), ": row ", first, " is outside tensor ", name);
    return reinterpret_cast<const uint16_t*>(t.gguf->bytes.data()) + (t.first_gguf_row + first) * t.row_length();
  }
  std::optional<GgmlType> block_type(const std::string& name) const override {
    const HfTensorSource& t = tensor(name);
    if (t.k_b != nullptr) return std::nullopt;
    return t.gguf->type;
  }
  std::span<const std::byte> stored_row(const std::string& name, int64_t row) const override {
    return tensor(name).stored_row(row);
  }

 private:
  const HfTensorSource& tensor(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) fail(describe(), ": no tensor ", name);
    return it->second;
  }

  std::shared_ptr<const GgufFile> file_;  // tensors_ point into it
  std::map<std::string, HfTensorSource> tensors_;
};

}  // namespace

std::unique_ptr<TensorSource> open_gguf_source(std::shared_ptr<const GgufFile> file, const ModelInfo& model) {
  return std::make_unique<GgufSource>(std::move(file), model);
}

std::unique_ptr<TensorSource> open_gguf_source(const std::string& path, const ModelInfo& model) {
  return open_gguf_source(std::make_shared<const GgufFile>(path), model);
}

}  // namespace kiln
