// Graph IR: the model as a static list of ops over named buffers, built from a ModelSpec.
// Shapes are static except T, the number of tokens in a step (≤ build.max_batched_tokens).
// The emitters turn the same graph into the CUDA forward (prefill and decode) and the CPU
// reference forward, so the two backends cannot drift apart.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "codegen/model_spec.hpp"
#include "codegen/op_record.hpp"

namespace kiln::codegen {



// Element type of a buffer on the GPU: `bf16` (the activations; the CPU reference keeps them in
// fp32), `f32` (the residual stream, kept in fp32 for accuracy; router logits), `i32` (indices).
enum class Elem { bf16, f32, i32 };

// An activation buffer holding `per_token` elements for each of the step's T tokens.
struct Buffer {
  std::string name;     // C++ identifier in the generated forward
  Elem elem = Elem::bf16;
  std::string per_token;  // Constant name: elements per token
  std::string layout;   // what a row holds, e.g. "q 9×64 | k 3×64 | v 3×64"
};

// A named constant of the generated model.hpp. Ops refer to sizes by these names, so generated
// code reads `kHiddenSize`, not 576, and every literal lives in one place with its origin.
struct Constant {
  std::string name;      // kHiddenSize
  bool is_real = false;  // false: int; true: real (emitted as `type`)
  std::string type = "int";  // int, float (kernel arguments), double (host math: RoPE tables)
  int64_t int_value = 0;
  double real_value = 0;
  std::string origin;    // the config field, or how it is derived
};

// One op of the graph: an instance of its record (codegen/ops.def) with every argument and shape
// member bound. What it reads and writes follows from the record's argument sources.
struct Op {
  OpKind kind;
  std::string label;     // HF module name(s) this op implements, e.g. "self_attn.q_proj,k_proj,v_proj"
  std::string math;      // one-line formula with the config's numbers, emitted as the comment
  std::map<std::string, std::string> args;   // record argument -> buffer, or weight field
  std::map<std::string, std::string> shape;  // shape member -> constant name, or a literal of its type
  std::string rows = "T";  // the rows it runs over: T (every token), N (the rows that need logits), ...
  // Tensor parallelism: which ranks run it. "" every rank; "first": rank 0 only, and the next op,
  // "others", on every other rank (the generated code's `if (ctx.rank == 0) ... else ...`).
  std::string rank_case;
  // A `warm` argument bound to the next layer's weight: the block's end (its layers are [.., end)),
  // past which there is none.
  std::string warm_layer_end;
  // Runs on the side stream (CudaContext::fork at decode, fork_prefill at prefill) beside the ops
  // after it, up to the first op that reads what a side op wrote, which waits for it (CudaContext::join).
  bool beside = false;

  // Fusion (fuse.cpp). A fused op lists the ops it replaces in `parts`: the CPU reference runs
  // them one by one, the CUDA forward runs one kernel.
  std::vector<Op> parts;
  std::string kernel;    // its wrapper's name in kernels.cu; ops with the same rendered call share one
  // FP8 inputs (pair_fp8_inputs) written by an op that sees a row one head at a time (the
  // attention), so scaled per 128 columns whatever the matrix's scale: set on it and its projection.
  bool fp8_per_head = false;
  // Decode: a residual projection's split sums left for the RMSNorm after it (pair_pending_sums):
  // what both pass for their `sums` argument ("&pending", or a condition on the layer); "" passes
  // nullptr (the projection adds its sums itself).
  std::string pending_sums;

  const OpRecord& record() const { return codegen::record(kind); }
  // Buffers (in the record's argument order) and weight fields bound to its arguments.
  std::vector<std::string> reads() const;
  std::vector<std::string> writes() const;
  std::vector<std::string> weights() const;
};

// Whether op reads any of `buffers`.
bool reads_any_of(const Op& op, const std::vector<std::string>& buffers);

// Visits `op`, then its fused parts depth first (a part's own parts after it); descend(op) says
// whether to enter an op's parts (every op's, when left out).
template <typename OpT, typename F, typename Descend>
void visit_op_and_parts(OpT& op, F&& f, Descend&& descend) {
  f(op);
  if (!descend(op)) return;
  for (auto& part : op.parts) visit_op_and_parts(part, f, descend);
}
template <typename OpT, typename F>
void visit_op_and_parts(OpT& op, F&& f) {
  visit_op_and_parts(op, f, [](const Op&) { return true; });
}

// A run of layers with one structure; the forward loops over [first, last).
struct LayerBlock {
  std::string name;          // "decoder_layer"
  int64_t first = 0, last = 0;
  std::vector<std::pair<std::string, std::vector<Op>>> stages;  // ("self-attention", ops), ("MLP", ops)
};

// A weight tensor of the generated Weights struct.
// A tensor [d0, ..., dn] is viewed as rows [d0·…·d(n-1), dn]; a vector [n] is one row.
struct WeightSource {
  std::string hf_name;       // may contain {L} (layer) and {E} (expert)
  int64_t rows = 0;          // rows taken per group
  int64_t row_begin = 0;
  int64_t groups = 1;        // for per-head slices: `groups` runs of `rows`, `group_stride` apart
  int64_t group_stride = 0;
  // A tensor-parallel rank's slice (runtime/model/model_def.hpp says how the loader reads them):
  // rows q × rank_rows further, columns [q × rank_cols, + cols) when cols > 0, q = rank / rank_group;
  // the whole HF tensor is hf_rows × hf_cols.
  int64_t rank_rows = 0;
  int64_t rank_cols = 0;
  int64_t cols = 0;
  int64_t rank_group = 1;
  int64_t hf_rows = 0;
  int64_t hf_cols = 0;
  int64_t rank_experts = 0;  // expert parallelism: {E} counts from rank × rank_experts
};
struct WeightDecl {
  std::string field;         // member of Weights / LayerWeights
  std::string name;          // kiln name: "embed_tokens", "layers.{L}.qkv_proj"
  bool per_layer = false;
  int64_t layer_first = 0, layer_last = 0;
  std::vector<int64_t> shape;              // kiln tensor shape (one layer)
  std::vector<std::vector<WeightSource>> layouts;  // alternative HF layouts; first complete wins
  std::string tied_to;       // fallback when no layout is present (lm_head -> embed_tokens)
  std::string comment;       // what it is, in the model card's words
  int64_t experts = 0;       // > 0: sources with {E} repeat for each expert, stacked along rows
  // Read by linear ops only (ops.def's `matrix` arguments): a GpuMatrix on the GPU, which the loader
  // may keep in a GGUF file's quantized blocks (mark_matrix_weights sets it).
  bool matrix = false;
  // A matrix read only by the embedding lookup (one row a token), not streamed by a linear op.
  bool lookup = false;
};

struct Graph {
  bool latent_kv = false;  // the KV cache holds MLA latents (one row per token) instead of k and v
  // Decode steps of more rows than one GEMV pass (kDecodeGemmAbove: kGemvPassTokens) may run each
  // bf16 projection on cuBLASLt, as the prefill does, reading its weight once a step instead of once
  // a pass (cuda::decode_on_gemm decides per step; --batch-invariant keeps the GEMV). Such a step's
  // sums then take another order than a sequence alone: up to one pass they never do. Builds of
  // max_batch past one pass on one GPU; a tensor-parallel rank's projections keep the GEMV.
  bool decode_gemm_past_pass = false;
  std::vector<Constant> constants;
  std::vector<Buffer> buffers;
  std::vector<Op> prologue;              // before the layers (embedding)
  std::vector<LayerBlock> blocks;        // the layers
  std::vector<Op> epilogue;              // after the layers (final norm, LM head)
  std::vector<WeightDecl> weights;

  const Buffer& buffer(const std::string& name) const;
  const Constant& constant(const std::string& name) const;
  const WeightDecl& weight(const std::string& field) const;
  int64_t value(const std::string& constant_name) const;  // an int constant's value
  // A layer index as generated code writes it: "0", "kFirstKDenseReplace", "kNumLayers".
  std::string layer_bound(int64_t layer) const;
  // Defines (or re-finds, when name and value agree) a constant; returns its name.
  std::string define(const std::string& name, int64_t value, const std::string& origin);
  std::string define_real(const std::string& name, double value, const std::string& origin,
                          const std::string& type = "float");
  std::vector<const Op*> all_ops() const;
};

// Whether some op runs beside the others (Op::beside): the side stream, its decode scratch and cuBLASLt runner.
bool has_beside_ops(const Graph& g);

Graph build_graph(const ModelSpec& spec);

// The fusion pass (fuse.cpp), run by build_graph.
void fuse(Graph& graph);

// The byte offset of each buffer in the activation arena, planned at codegen from the buffers'
// live ranges (buffers whose lives do not overlap share bytes). Sizes assume T = max_batched_tokens.
struct ArenaPlan {
  std::map<std::string, int64_t> offset;  // bytes
  int64_t bytes = 0;
};
ArenaPlan plan_arena(const Graph& graph, int64_t max_tokens, int64_t act_bytes);

}  // namespace kiln::codegen
