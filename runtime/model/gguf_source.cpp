// TensorSource over a Llama-architecture GGUF file (runtime/weights/gguf_llama.hpp maps the names,
// dequantizes and undoes llama.cpp's q/k row permutation).
#include <cmath>
#include <map>

#include "runtime/core/error.hpp"
#include "runtime/model/gguf_source.hpp"
#include "runtime/weights/gguf_llama.hpp"

namespace kiln {

namespace {

// A GGUF file made for another model (or another size) must not load as garbage.
void check_hyperparameters(const std::string& path, const LlamaHyperparams& hp, const ModelInfo& m) {
  auto check = [&](const char* what, int64_t file_value, int64_t model_value) {
    if (file_value != model_value) {
      fail(path, ": ", what, " is ", file_value, " in the GGUF file but ", model_value, " in ", m.name,
           " (generated from ", m.source, ")");
    }
  };
  check("hidden size (llama.embedding_length)", hp.hidden_size, m.hidden_size);
  check("layer count (llama.block_count)", hp.num_hidden_layers, m.num_layers);
  check("attention heads (llama.attention.head_count)", hp.num_attention_heads, m.num_attention_heads);
  check("KV heads (llama.attention.head_count_kv)", hp.num_key_value_heads, m.num_key_value_heads);
  check("head dim", hp.head_dim, m.head_dim);
  check("intermediate size (llama.feed_forward_length)", hp.intermediate_size, m.intermediate_size);
  check("vocabulary size", hp.vocab_size, m.vocab_size);
  check("tied embeddings (no output.weight)", hp.tie_word_embeddings, m.tie_word_embeddings);
  if (std::fabs(hp.rms_norm_eps - m.rms_norm_eps) > 1e-3 * m.rms_norm_eps) {
    fail(path, ": RMSNorm epsilon is ", hp.rms_norm_eps, " in the GGUF file but ", m.rms_norm_eps, " in ", m.name);
  }
  if (std::fabs(hp.rope_theta - m.rope.theta) > 1e-6 * m.rope.theta) {
    fail(path, ": rope theta is ", hp.rope_theta, " in the GGUF file but ", m.rope.theta, " in ", m.name);
  }
  if (hp.rope_scaling || hp.has_rope_freqs) {
    if (m.rope.kind == RopeKind::standard) fail(path, ": the GGUF file scales rope frequencies but ", m.name, " does not");
  }
}

class GgufSource final : public TensorSource {
 public:
  GgufSource(std::shared_ptr<const GgufFile> file, const ModelInfo& model) : file_(std::move(file)) {
    const LlamaHyperparams hp = read_llama_hyperparams(*file_);  // rejects other architectures
    check_hyperparameters(file_->origin(), hp, model);
    for (HfTensorSource& t : llama_hf_tensors(*file_, hp)) {
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
    auto it = tensors_.find(name);
    if (it == tensors_.end()) fail(describe(), ": no tensor ", name);
    it->second.read_rows_f32(first, std::span<float>(out, static_cast<size_t>(count * it->second.row_length())));
  }

 private:
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
