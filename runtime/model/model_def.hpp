// The contract between a generated model (generated/<model>/) and the model-independent runtime.
// A generated model provides a ModelDef: its numbers (ModelInfo), its weight manifest, and
// factories for its two backends. This header is CUDA-free so host-only code can include it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/step_batch.hpp"
#include "runtime/parallel/collective.hpp"
#include "templates/weight_matrix.hpp"

namespace kiln {

// ---- weight manifest (generated weights.inc) ----

// Rows of one HF tensor appended to a kiln tensor. A tensor [d0, ..., dn] is viewed as rows
// [d0·…·d(n-1), dn] (a vector [n] is one row). Taken: `groups` runs of
// `rows` rows, the first at `row_begin`, each next one `group_stride` rows further (per-head slices).
struct WeightSource {
  const char* hf_name;  // may contain {L} (layer index) and {E} (expert index)
  int64_t rows;
  int64_t row_begin = 0;
  int64_t groups = 1;
  int64_t group_stride = 0;
  // Tensor parallelism: one rank's slice (all zero for a whole tensor). With q = rank / rank_group
  // (rank_group > 1: ranks sharing one slice, KV heads replicated over ranks), the rows taken start
  // q × rank_rows further; with cols > 0 only columns [q × rank_cols, q × rank_cols + cols) of each
  // row are taken (row-parallel projections). hf_rows × hf_cols is then the whole HF tensor.
  int64_t rank_rows = 0;
  int64_t rank_cols = 0;
  int64_t cols = 0;
  int64_t rank_group = 1;
  int64_t hf_rows = 0;
  int64_t hf_cols = 0;
  // Expert parallelism: a source naming {E} that holds one rank's experts: {E} counts from
  // rank × rank_experts (the spec's `experts` of them), of the model's rank × … experts in all.
  int64_t rank_experts = 0;
};

struct WeightSpec {
  const char* name;                   // kiln name: "embed_tokens", "layers.{L}.qkv_proj"
  bool per_layer;
  int64_t layer_first, layer_last;    // layers [first, last) when per_layer
  std::vector<int64_t> shape;         // kiln tensor shape for one layer
  int64_t experts;                    // > 0: sources with {E} repeat for experts 0..experts-1, stacked
  std::vector<std::vector<WeightSource>> layouts;  // alternative HF layouts; the first complete one is used
  const char* tied_to;                // "" or the kiln weight reused when no layout is present
  bool matrix;                        // read by linear ops only: the GPU may keep a GGUF file's blocks
  // A matrix read only by the embedding lookup, one row a token: a decode step streams it (and the
  // prefill dequantizes it) only as the target of a tied LM head.
  bool lookup = false;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// Loaded weights by kiln name (and layer): pointers into backend memory (fp32 host for the CPU
// reference, bf16 device for CUDA). Generated bind_weights() turns it into the model's struct.
// A projection (WeightSpec::matrix) may be held in a GGUF file's blocks on the GPU: its format
// says which (MatrixFormat::bf16 for every other tensor, and for the reference's fp32 rows).
class WeightTable {
 public:
  // Replaces an earlier one. fp8_scale: GpuMatrix's (an FP8 matrix of one scale), else 0.
  void set(const std::string& name, int64_t layer, const void* data, MatrixFormat format, float fp8_scale = 0.0f);
  // A projection set before whose rows from `split` on are a second matrix at `tail` in
  // `tail_format` (GpuMatrix::split).
  void set_tail(const std::string& name, int64_t layer, int64_t split, const void* tail, MatrixFormat tail_format);
  const void* get(const std::string& name, int64_t layer = -1) const;  // throws when absent
  MatrixFormat format(const std::string& name, int64_t layer = -1) const;
  template <typename T>
  const T* get_as(const std::string& name, int64_t layer = -1) const {
    return static_cast<const T*>(get(name, layer));
  }
  // A projection as the generated Weights<T> holds it (templates/weight_matrix.hpp).
  template <typename T>
  Matrix<T> get_matrix(const std::string& name, int64_t layer = -1) const {
    const Entry& e = find(name, layer);
    Matrix<T> m{e.data, e.format};
    if constexpr (requires { m.fp8_scale; }) m.fp8_scale = e.fp8_scale;
    m.split = static_cast<int>(e.split);
    m.tail = e.tail;
    m.tail_format = e.tail_format;
    return m;
  }

 private:
  struct Entry {
    std::string key;  // "name#layer"
    const void* data;
    MatrixFormat format;
    float fp8_scale;
    int64_t split = 0;  // set_tail's
    const void* tail = nullptr;
    MatrixFormat tail_format = MatrixFormat::bf16;
  };
  const Entry& find(const std::string& name, int64_t layer) const;
  std::vector<Entry> entries_;
};

// ---- model numbers the runtime needs ----

enum class RopeKind { standard, llama3, yarn };

struct RopeInfo {
  RopeKind kind = RopeKind::standard;
  double theta = 10000.0;
  int32_t rotary_dim = 0;    // dims rotated per head
  bool interleaved = false;  // pairs (2i, 2i+1) (DeepSeek) instead of (i, i + dim/2) (Llama, Qwen)
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;         // llama3
  double beta_fast = 32.0, beta_slow = 1.0;                     // yarn
  double mscale = 1.0, mscale_all_dim = 0.0;                    // yarn
};

// One architecture field of the config the model was generated from, as HF's config.json names it
// (codegen/architecture_fields.hpp). The runtime reads a model directory's config.json into the
// same list and refuses the directory at the first field that differs.
struct ConfigField {
  const char* name;   // "rope_theta"
  const char* value;  // "1000000": integers and names exactly, reals in shortest round-trip form
  bool real;          // compared within fp32 rounding
};

struct ModelInfo {
  const char* name;          // "smollm2-135m"
  // Tensor-parallel ranks this definition is one of (1: the whole model). A rank's definition has
  // its own shard sizes (heads, KV heads, intermediate size, kv_elems_per_token, arena sizes, weight
  // bytes); vocab_size stays the whole vocabulary (its forward gathers the logits).
  int32_t tensor_parallel = 1;
  const char* family;        // "llama", "qwen3", "deepseek_v2"
  const char* source;        // the config it was generated from
  int32_t vocab_size;
  int32_t hidden_size;
  int32_t num_layers;
  int32_t max_context;
  int32_t page_size;
  int32_t max_batch;
  int32_t max_batched_tokens;
  int32_t kv_elems_per_token;  // per layer: 2 × kv_heads × head_dim, or the MLA latent width
  int64_t bos_token_id;        // -1: none
  std::vector<int32_t> eos_token_ids;
  const char* chat_template;   // "none", "chatml", "llama3", "deepseek"
  const char* chat_default_system;  // system prompt when a chat gives none ("" for none)
  RopeInfo rope;
  int64_t ref_arena_bytes;     // CPU reference activations (planned at codegen)
  int64_t gpu_arena_bytes;     // CUDA activations (planned at codegen)
  int64_t gpu_scratch_bytes;   // CUDA decode-attention partials
  // Some ops run beside the others (CudaContext::fork, fork_prefill): a second stream, the decode's
  // scratch and the prefill's cuBLASLt runner of their own.
  bool side_stream = false;
  int64_t gpu_side_scratch_bytes = 0;
  int64_t gpu_decode_counter_words;  // CUDA decode attention's merge counters (zeroed once)
  // Bytes-read accounting of a decode step (bf16): all weights but the embedding row and the
  // routed experts, then each chosen expert once per layer (counted per step).
  int64_t decode_weight_bytes;
  int64_t routed_expert_bytes;
  int32_t num_routed_experts;  // 0: no MoE
  // Hyperparameters a checkpoint must agree with (GGUF metadata is checked against these).
  int32_t num_attention_heads;
  int32_t num_key_value_heads;
  int32_t head_dim;            // dense attention; 0 for MLA
  bool tie_word_embeddings;
  int32_t intermediate_size;
  double rms_norm_eps;
  std::vector<ConfigField> config_fields;  // the source config's architecture, model_type first
  // The whole-step decode kernel (templates/decode_step.cuh): decode steps of up to this many
  // sequences run it (0: the model has none), with step_sync_words zeroed counter words on the GPU.
  int32_t megakernel_max_batch = 0;
  int32_t step_sync_words = 0;
  // CUDA MLA prefill's expanded keys and values (templates/mla_attention_expanded.cuh; 0: none).
  int64_t gpu_mla_expanded_bytes = 0;
  // Decode steps of more sequences than this may run the bf16 projections on cuBLASLt
  // (cuda::decode_on_gemm: one GEMV pass); 0: the build's max_batch is within one pass.
  int32_t decode_gemm_above = 0;
};

// ---- backends ----

// The CPU reference backend's per-model forward: fp32, the same graph as the CUDA forward.
struct RefContext {
  float* arena;               // ModelInfo::ref_arena_bytes
  float* kv_cache;            // [num_layers][num_pages][page_size × kv_elems_per_token], see kv_layout;
                              // fp32 values, or bf16 ones (uint16_t) with kv_bf16
  int64_t num_pages;
  const float* rope;          // [max_context][rotary_dim / 2][cos, sin]
  uint8_t* expert_usage;      // null, or [num_layers][num_routed_experts] flags the routing sets (--profile)
  int32_t rank = 0;           // tensor-parallel rank (0 without tensor parallelism)
  Collective* collective = nullptr;  // the ranks' sums and gathers; null without tensor parallelism
  bool fast_kernels = false;  // the fast CPU backend: ops with a runtime/cpu kernel run it (attention)
  bool kv_bf16 = false;       // the KV cache holds bf16 (the fast CPU backend's dense KV pages)
};
class RefForward {
 public:
  virtual ~RefForward() = default;
  // Runs one step; writes logits [step.num_logits(), vocab] (fp32, row-major).
  virtual void forward(const StepBatch& step, const RefContext& ctx, float* logits) const = 0;
};

// The CUDA backend's per-model forward. Contexts are runtime/cuda types, opaque here.
struct CudaContext;
struct CudaStep;
class CudaForward {
 public:
  virtual ~CudaForward() = default;
  // Any batch (prefill chunks, mixed with decodes): cuBLASLt GEMMs, prefill attention.
  virtual void prefill(const CudaStep& step, const CudaContext& ctx, float* logits) const = 0;
  // Every sequence has exactly one new token: our GEMV kernels, split-KV decode attention.
  virtual void decode(const CudaStep& step, const CudaContext& ctx, float* logits) const = 0;
};

struct ModelDef;
// A build of the model for `ranks` tensor-parallel ranks (build.tensor_parallel): the definition
// of one rank, which every rank of the group runs with its own rank index.
struct TensorParallelDef {
  int32_t ranks;
  const ModelDef& (*rank_def)();
};

struct ModelDef {
  ModelInfo info;
  const std::vector<WeightSpec>* weights;
  std::unique_ptr<RefForward> (*make_ref_forward)(const WeightTable& weights);
  std::unique_ptr<CudaForward> (*make_cuda_forward)(const WeightTable& weights);
  std::vector<TensorParallelDef> tensor_parallel = {};  // the builds for 2+ ranks (none: one GPU only)
};

}  // namespace kiln
