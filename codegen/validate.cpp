// Consistency and support checks on a ModelSpec. Messages name the file and the field as the user
// wrote it (kiln YAML: model.X / build.X; HF config.json: X).
#include <regex>
#include <set>
#include <string>

#include "codegen/config_load.hpp"
#include "runtime/core/error.hpp"

namespace kiln::codegen {

namespace {

// Limits that keep every size product far from int64 overflow and inside what the kernels take.
constexpr int64_t kMaxDim = 1 << 20;           // hidden, intermediate, ranks
constexpr int64_t kMaxVocab = 1 << 23;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxTensorParallel = 64;  // GPUs one rank group spans (NVLink domains are smaller)
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 256;           // attention kernels keep a head in registers
constexpr int64_t kMaxPageSize = 1024;
constexpr int64_t kMaxContext = 1 << 22;
constexpr int64_t kMaxBatchedTokens = 1 << 16;
const std::set<std::string> kSupportedArchs = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"};

class Checker {
 public:
  explicit Checker(const ModelSpec& spec) : spec_(spec), hf_(spec.source.ends_with(".json")) {}

  std::string arch(const std::string& field) const { return hf_ ? field : "model." + field; }
  std::string build(const std::string& field) const { return hf_ ? "kilnc option " + field : "build." + field; }

  template <typename... Parts>
  [[noreturn]] void error(const std::string& field, Parts&&... parts) const {
    fail(spec_.source, ": field '", field, "' ", std::forward<Parts>(parts)...);
  }
  void range(const std::string& field, int64_t value, int64_t lo, int64_t hi) const {
    if (value < lo || value > hi) error(field, "is ", value, "; expected ", lo, "..", hi);
  }

 private:
  const ModelSpec& spec_;
  bool hf_;
};

void check_dense_attention(const ModelSpec& s, const Checker& c) {
  c.range(c.arch("num_attention_heads"), s.num_attention_heads, 1, kMaxHeads);
  c.range(c.arch("num_key_value_heads"), s.num_key_value_heads, 1, s.num_attention_heads);
  if (s.num_attention_heads % s.num_key_value_heads != 0) {
    c.error(c.arch("num_key_value_heads"), "(", s.num_key_value_heads, ") must divide num_attention_heads (",
            s.num_attention_heads, ")");
  }
  c.range(c.arch("head_dim"), s.head_dim, 2, kMaxHeadDim);
  if (s.head_dim % 2 != 0) c.error(c.arch("head_dim"), "(", s.head_dim, ") must be even: RoPE rotates pairs");
}

void check_mla(const ModelSpec& s, const Checker& c) {
  const MlaSpec& m = *s.mla;
  c.range(c.arch("num_attention_heads"), s.num_attention_heads, 1, kMaxHeads);
  if (m.q_lora_rank != 0) c.range(c.arch("q_lora_rank"), m.q_lora_rank, 1, kMaxDim);
  c.range(c.arch("kv_lora_rank"), m.kv_lora_rank, 1, 1024);
  c.range(c.arch("qk_nope_head_dim"), m.qk_nope_head_dim, 1, kMaxHeadDim);
  c.range(c.arch("qk_rope_head_dim"), m.qk_rope_head_dim, 2, kMaxHeadDim);
  c.range(c.arch("v_head_dim"), m.v_head_dim, 1, kMaxHeadDim);
  if (m.qk_rope_head_dim % 2 != 0) {
    c.error(c.arch("qk_rope_head_dim"), "(", m.qk_rope_head_dim, ") must be even: RoPE rotates pairs");
  }
}

void check_moe(const ModelSpec& s, const Checker& c) {
  const MoeSpec& m = *s.moe;
  c.range(c.arch("n_routed_experts"), m.n_routed_experts, 1, 4096);
  c.range(c.arch("n_shared_experts"), m.n_shared_experts, 0, 64);
  c.range(c.arch("moe_intermediate_size"), m.moe_intermediate_size, 1, kMaxDim);
  c.range(c.arch("first_k_dense_replace"), m.first_k_dense_replace, 0, s.num_hidden_layers);
  if (m.num_experts_per_tok > m.n_routed_experts) {
    c.error(c.arch("num_experts_per_tok"), "(", m.num_experts_per_tok, ") exceeds n_routed_experts (",
            m.n_routed_experts, ")");
  }
  if (m.topk_method == TopkMethod::group_limited_greedy) {
    if (m.topk_group > m.n_group) {
      c.error(c.arch("topk_group"), "(", m.topk_group, ") exceeds n_group (", m.n_group, ")");
    }
    if (m.n_routed_experts % m.n_group != 0) {
      c.error(c.arch("n_group"), "(", m.n_group, ") must divide n_routed_experts (", m.n_routed_experts, ")");
    }
    const int64_t reachable = m.topk_group * (m.n_routed_experts / m.n_group);
    if (m.num_experts_per_tok > reachable) {
      c.error(c.arch("num_experts_per_tok"), "(", m.num_experts_per_tok, ") exceeds the ", reachable,
              " experts in topk_group (", m.topk_group, ") groups of ", m.n_routed_experts / m.n_group);
    }
  }
}

void check_rope(const ModelSpec& s, const Checker& c) {
  const RopeSpec& r = s.rope;
  const std::string scaling = s.source.ends_with(".json") ? "rope_scaling." : "model.rope_scaling.";
  if (r.type == RopeType::llama3) {
    if (!(r.low_freq_factor < r.high_freq_factor)) {
      c.error(scaling + "low_freq_factor", "(", r.low_freq_factor, ") must be below high_freq_factor (",
              r.high_freq_factor, ")");
    }
  }
  if (r.type == RopeType::yarn) {
    if (r.factor < 1.0) c.error(scaling + "factor", "(", r.factor, ") must be >= 1 for yarn");
    if (!(r.beta_fast > r.beta_slow)) {
      c.error(scaling + "beta_fast", "(", r.beta_fast, ") must exceed beta_slow (", r.beta_slow, ")");
    }
  }
  if (r.type != RopeType::standard && r.original_max_position_embeddings > s.max_position_embeddings) {
    c.error(scaling + "original_max_position_embeddings", "(", r.original_max_position_embeddings,
            ") exceeds max_position_embeddings (", s.max_position_embeddings, ")");
  }
}

void check_tensor_parallel(const ModelSpec& s, const Checker& c);

void check_build(const ModelSpec& s, const Checker& c) {
  const BuildSpec& b = s.build;
  if (b.dtype != "bf16") c.error(c.build("dtype"), "is '", b.dtype, "'; supported: bf16");
  c.range(c.build("max_context"), b.max_context, 1, kMaxContext);
  if (b.max_context > s.max_position_embeddings) {
    c.error(c.build("max_context"), "(", b.max_context, ") is beyond the rope limit max_position_embeddings (",
            s.max_position_embeddings, ")");
  }
  c.range(c.build("kv_page_size"), b.kv_page_size, 1, kMaxPageSize);
  c.range(c.build("max_batch"), b.max_batch, 1, 4096);
  c.range(c.build("max_batched_tokens"), b.max_batched_tokens, b.max_batch, kMaxBatchedTokens);
  c.range(c.build("attention_partition"), b.attention_partition, 16, 65536);
  c.range(c.build("megakernel_max_batch"), b.megakernel_max_batch, 0, 8);  // one token tile of the mma
  if (b.gpu_archs.empty()) c.error(c.build("gpu_archs"), "is empty; supported: sm_80, sm_86, sm_89, sm_90, sm_90a");
  for (const auto& a : b.gpu_archs) {
    if (!kSupportedArchs.count(a)) {
      c.error(c.build("gpu_archs"), "names '", a, "'; supported: sm_80, sm_86, sm_89, sm_90, sm_90a");
    }
  }
  check_tensor_parallel(s, c);
}

// Each rank holds whole attention heads (KV heads split, or each replicated over t / kv_heads
// ranks), an equal share of the MLP's intermediate features and of the vocabulary, and with
// DeepSeekMoE an equal share of the routed experts: a size that does not divide them is refused
// here rather than padded at run time.
void check_tensor_parallel(const ModelSpec& s, const Checker& c) {
  const std::string field = s.source.ends_with(".json") ? "kilnc option --tensor-parallel" : "build.tensor_parallel";
  std::set<int64_t> seen;
  for (const int64_t t : s.build.tensor_parallel) {
    if (t < 2 || t > kMaxTensorParallel) {
      c.error(field, "names ", t, " ranks; expected 2 to ", kMaxTensorParallel, " (one GPU is always built)");
    }
    if (!seen.insert(t).second) c.error(field, "names ", t, " twice");
    const auto need = [&](const char* what, int64_t value) {
      if (value % t != 0) c.error(field, "names ", t, " ranks, which do not divide ", what, " (", value, ")");
    };
    need("num_attention_heads", s.num_attention_heads);
    need("vocab_size", s.vocab_size);
    if (s.family == Family::deepseek_v2 && s.moe) {
      const MoeSpec& m = *s.moe;
      if (m.first_k_dense_replace > 0) need("intermediate_size (the dense layers' MLP)", s.intermediate_size);
      if (m.first_k_dense_replace < s.num_hidden_layers) {
        need("n_routed_experts (each rank holds as many routed experts)", m.n_routed_experts);
        if (m.n_shared_experts == 0) {
          c.error(field, "names ", t, " ranks, but n_shared_experts is 0: tensor parallelism over DeepSeekMoE is built "
                  "with shared experts (their shares open each rank's sum of the experts)");
        }
        need("n_shared_experts × moe_intermediate_size (the shared experts' features)",
             m.n_shared_experts * m.moe_intermediate_size);
      }
      continue;  // MLA: every head reads the one latent cache, which each rank keeps whole
    }
    need("intermediate_size", s.intermediate_size);
    const int64_t kv = s.num_key_value_heads;
    if (kv % t != 0 && t % kv != 0) {
      c.error(field, "names ", t, " ranks; num_key_value_heads (", kv,
              ") must be a multiple of it or divide it (KV heads are split or replicated whole)");
    }
  }
}

}  // namespace

void validate(const ModelSpec& s) {
  const Checker c(s);
  if (!std::regex_match(s.name, std::regex("[a-z][a-z0-9.-]*"))) {
    c.error(s.source.ends_with(".json") ? "kilnc option --name" : "name", "is '", s.name,
            "'; expected lowercase letters, digits, '.' and '-', starting with a letter");
  }
  c.range(c.arch("hidden_size"), s.hidden_size, 1, kMaxDim);
  c.range(c.arch("num_hidden_layers"), s.num_hidden_layers, 1, kMaxLayers);
  c.range(c.arch("intermediate_size"), s.intermediate_size, 1, kMaxDim);
  c.range(c.arch("vocab_size"), s.vocab_size, 2, kMaxVocab);
  c.range(c.arch("max_position_embeddings"), s.max_position_embeddings, 1, 1LL << 32);
  if (!(s.rms_norm_eps > 0 && s.rms_norm_eps < 1)) c.error(c.arch("rms_norm_eps"), "(", s.rms_norm_eps, ") must be in (0, 1)");
  if (s.bos_token_id >= s.vocab_size) {
    c.error(c.arch("bos_token_id"), "(", s.bos_token_id, ") is not below vocab_size (", s.vocab_size, ")");
  }
  for (int64_t eos : s.eos_token_ids) {
    if (eos >= s.vocab_size) c.error(c.arch("eos_token_id"), "(", eos, ") is not below vocab_size (", s.vocab_size, ")");
  }
  if (s.family == Family::deepseek_v2) {
    if (!s.mla || !s.moe) c.error(c.arch("family"), "deepseek_v2 needs its MLA and MoE fields");
    check_mla(s, c);
    check_moe(s, c);
  } else {
    if (s.mla || s.moe) c.error(c.arch("family"), "MLA and MoE fields belong to deepseek_v2 only");
    check_dense_attention(s, c);
  }
  check_rope(s, c);
  check_build(s, c);
}

}  // namespace kiln::codegen
