// HF config.json import (model_type llama, qwen3, deepseek_v2) onto the same ModelSpec.
// Options kiln does not implement are rejected by name; fields known to be irrelevant to inference
// are skipped; anything else unknown is reported as a warning (new transformers versions add
// fields, and an unknown field should not fail a build, but nobody should miss it either).
#include <algorithm>
#include <filesystem>
#include <set>

#include "codegen/config_arch.hpp"
#include "codegen/config_load.hpp"
#include "runtime/core/strict_json.hpp"

namespace kiln::codegen {

namespace {

// Fields that never change what the model computes at inference.
const std::set<std::string> kIgnoredHfFields = {
    "_name_or_path", "architectures", "auto_map", "model_type", "torch_dtype", "dtype",
    "transformers_version", "initializer_range", "use_cache", "pad_token_id", "attention_dropout",
    "tie_word_embeddings", "output_attentions", "output_hidden_states", "return_dict",
    "max_window_layers", "sliding_window", "aux_loss_alpha", "seq_aux", "ep_size",
    "mlp_bias", "attention_bias", "hidden_act", "pretraining_tp", "use_sliding_window",
    "layer_types", "scoring_func", "moe_layer_freq", "rope_interleave", "bos_token_id",
    "eos_token_id", "unsloth_fixed", "use_flash_attn", "quantization_config", "id2label",
    "label2id", "problem_type", "is_decoder", "add_cross_attention", "chunk_size_feed_forward",
    "tokenizer_class", "prefix", "sep_token_id", "decoder_start_token_id", "task_specific_params",
    "finetuning_task", "num_labels", "head_dim", "qk_head_dim", "rope_scaling", "rope_theta",
    "rope_parameters"};

// Options with a value kiln implements, or an error naming the field and what is supported.
void reject_unsupported_options(const JsonFields& doc, Family family) {
  if (doc.has("hidden_act") && doc.string("hidden_act") != "silu") {
    doc.error("hidden_act", "'" + doc.string("hidden_act") + "' is not supported; supported: silu");
  }
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    if (doc.has(bias) && doc.boolean(bias)) doc.error(bias, "biases are not supported; supported: false");
  }
  if (doc.has("pretraining_tp") && doc.integer("pretraining_tp") != 1) {
    doc.error("pretraining_tp", "only 1 is supported");
  }
  if (family == Family::qwen3) {
    if (doc.has("use_sliding_window") && doc.boolean("use_sliding_window")) {
      doc.error("use_sliding_window", "sliding-window attention is not supported; supported: false");
    }
    if (doc.has("layer_types")) {
      for (const auto& t : doc.string_list("layer_types")) {
        if (t != "full_attention") doc.error("layer_types", "'" + t + "' layers are not supported; supported: full_attention");
      }
    }
  }
  if (family == Family::deepseek_v2) {
    if (doc.has("scoring_func") && doc.string("scoring_func") != "softmax") {
      doc.error("scoring_func", "'" + doc.string("scoring_func") + "' is not supported; supported: softmax");
    }
    if (doc.has("moe_layer_freq") && doc.integer("moe_layer_freq") != 1) {
      doc.error("moe_layer_freq", "only 1 (every layer after first_k_dense_replace is MoE) is supported");
    }
  }
}

std::string name_from_path(const std::string& path) {
  std::filesystem::path p = std::filesystem::absolute(path).lexically_normal();
  std::string name = p.parent_path().filename().string();
  std::string out;
  for (char c : name) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '-';
  }
  if (out.empty() || !std::isalpha(static_cast<unsigned char>(out[0]))) out = "model-" + out;
  return out;
}

ChatFormat default_chat_format(Family family) {
  switch (family) {
    case Family::llama: return ChatFormat::llama3;
    case Family::qwen3: return ChatFormat::chatml;
    case Family::deepseek_v2: return ChatFormat::deepseek;
  }
  return ChatFormat::none;
}

}  // namespace

// The architecture part, shared by load_hf_config and read_hf_architecture; `doc` tells which
// fields were read (for the unknown-field warnings).
ModelSpec read_architecture_of(const JsonFields& doc, const std::string& path) {
  ModelSpec spec;
  spec.source = path;
  const std::string type = doc.choice("model_type", {"llama", "qwen3", "deepseek_v2"});
  spec.family = type == "llama" ? Family::llama : type == "qwen3" ? Family::qwen3 : Family::deepseek_v2;
  reject_unsupported_options(doc, spec.family);
  read_architecture(doc, spec);
  return spec;
}

ModelSpec read_hf_architecture(const std::string& path) {
  const JsonFields doc(read_json_file(path), path, "");
  return read_architecture_of(doc, path);
}

ModelSpec load_hf_config(const std::string& path, const ImportOptions& import, std::vector<std::string>* warnings) {
  // Strict: a repeated key is an error (nlohmann alone keeps the last), nesting is bounded.
  const JsonFields doc(read_json_file(path), path, "");
  ModelSpec spec = read_architecture_of(doc, path);

  spec.name = import.name.empty() ? name_from_path(path) : import.name;
  spec.chat_format = import.chat_template.empty() ? default_chat_format(spec.family)
                                                  : chat_format_from_name(import.chat_template);
  spec.build.max_context = import.max_context > 0 ? import.max_context
                                                  : std::min<int64_t>(spec.max_position_embeddings, 8192);
  spec.build.tensor_parallel = import.tensor_parallel;

  if (warnings) {
    for (const auto& key : doc.unread_keys()) {
      if (!kIgnoredHfFields.count(key)) warnings->push_back(path + ": ignoring unknown field '" + key + "'");
    }
  }
  validate(spec);
  return spec;
}

}  // namespace kiln::codegen
