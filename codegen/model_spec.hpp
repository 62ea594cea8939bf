// ModelSpec — everything kilnc knows about one model: its architecture (HF config names) and the
// build choices. Both front ends (kiln YAML, HF config.json) produce it; validate() checks it; the
// graph builder and emitters read only this.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::codegen {

enum class Family { llama, qwen3, deepseek_v2 };
enum class RopeType { standard, llama3, yarn };  // "standard": HF's "default" rope
enum class TopkMethod { greedy, group_limited_greedy };
enum class ChatFormat { none, chatml, llama3, deepseek };

const char* to_string(Family f);
const char* to_string(RopeType r);
const char* to_string(TopkMethod t);
const char* to_string(ChatFormat c);
inline const std::vector<std::string> kChatFormatNames = {"none", "chatml", "llama3", "deepseek"};
ChatFormat chat_format_from_name(const std::string& name);  // one of kChatFormatNames

struct RopeSpec {
  double theta = 10000.0;
  RopeType type = RopeType::standard;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;  // llama3, yarn
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  double beta_fast = 32.0;                       // yarn
  double beta_slow = 1.0;                        // yarn
  double mscale = 1.0;                           // yarn (DeepSeek)
  double mscale_all_dim = 0.0;                   // yarn (DeepSeek)
};

// Multi-head latent attention (DeepSeek-V2).
struct MlaSpec {
  int64_t q_lora_rank = 0;  // 0: q is a plain projection (HF null)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
};

// DeepSeekMoE.
struct MoeSpec {
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t first_k_dense_replace = 0;
  TopkMethod topk_method = TopkMethod::greedy;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
};

struct BuildSpec {
  std::string dtype = "bf16";
  int64_t max_context = 4096;
  int64_t kv_page_size = 16;
  int64_t max_batch = 64;            // sequences decoded together
  int64_t max_batched_tokens = 2048; // tokens in one step (prefill chunk budget)
  // Decode attention splits a sequence's context into partitions of this many tokens, each reduced
  // by its own block and then merged (PagedAttention V2). Short enough that a batch-1 decode of a
  // few thousand tokens still spreads over many SMs; long enough that the merge stays cheap.
  int64_t attention_partition = 512;
  std::vector<std::string> gpu_archs = {"sm_90a"};
  // Also embed PTX of the oldest gpu_archs entry, which newer GPUs JIT-compile. The test models turn
  // it off: they run only on the Hopper GPUs the tests use, and the PTX doubles nvcc's front-end time.
  bool jit_ptx = true;
  // Tensor-parallel rank counts built besides one GPU (generated/<model>/tp<N>/ each): attention
  // heads, the MLP and the vocabulary split over N ranks, summed and gathered with NCCL.
  std::vector<int64_t> tensor_parallel;
  // Decode steps of up to this many sequences run the whole-step kernel (templates/decode_step.cuh,
  // dense families on one GPU); 0: every decode step runs op by op.
  int64_t megakernel_max_batch = 8;
};

struct ModelSpec {
  std::string name;    // kebab-case, names generated/<name>/ and build/bin/<name>
  std::string source;  // the config file it came from, as given to kilnc (for messages/comments)
  Family family = Family::llama;

  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // dense attention; MLA uses MlaSpec
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeSpec rope;
  bool tie_word_embeddings = false;
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;
  ChatFormat chat_format = ChatFormat::none;
  std::string chat_default_system;  // the model card's default system prompt, if its template has one

  std::optional<MlaSpec> mla;
  std::optional<MoeSpec> moe;
  BuildSpec build;

  // Set on the copy kilnc builds one tensor-parallel rank's graph from: the sizes above stay the
  // whole model's, the graph builder divides them.
  int64_t ranks = 1;

  // C++ identifier derived from name: "llama-3.2-1b" -> "llama_3_2_1b".
  std::string id() const;
  // The generated code's namespace: kiln::models::<id>, and ::tp<ranks> for a rank's build.
  std::string ns() const;
  bool has_qk_norm() const { return family == Family::qwen3; }
};

}  // namespace kiln::codegen
