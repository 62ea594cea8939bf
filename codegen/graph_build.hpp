// Pieces shared by the per-family graph builders (graph_build.cpp, graph_build_deepseek.cpp).
#pragma once

#include <string>

#include "codegen/graph.hpp"
#include "codegen/op_shapes.hpp"

namespace kiln::codegen {

std::string fmt_real(double v);                     // shortest faithful text of a config number
std::string num(int64_t v);
std::string hf_layer(const std::string& suffix);    // "model.layers.{L}." + suffix

// ---- ops (graph_ops.cpp); sizes are names of constants of `g` ----
Op make_op(OpKind kind, const std::string& label, const std::string& math, std::map<std::string, std::string> args,
           std::map<std::string, std::string> shape, const std::string& kernel);
Op make_rmsnorm(const Graph& g, const std::string& weight, const std::string& in, const std::string& out,
                const std::string& dim);
// RoPE in place over `heads` vectors per row of `buffer` (vector h at offset + h·head_stride).
Op make_rope(const std::string& label, const std::string& buffer, const std::string& math, const std::string& heads,
             const std::string& head_stride, const std::string& rotary_dim, const std::string& row,
             const std::string& offset, bool interleaved, const std::string& kernel);
// out[rows, n] (=|+=) in[rows, k] · weight[n, k]ᵀ; rows: "T" (every token) or "N" (logit rows).
Op make_linear(const Graph& g, const std::string& label, const std::string& weight, const std::string& in,
               const std::string& out, const std::string& n, const std::string& k, LinearOut result,
               const std::string& detail, const std::string& rows = "T");
// silu(gate) ⊙ up over T rows, or T × rows_per_token rows (a token's chosen experts).
Op make_silu_mul(const std::string& label, const std::string& in, const std::string& out, const std::string& dim,
                 const Graph& g, const std::string& rows_per_token = "");
// x = Σ over the tensor-parallel ranks of each rank's x (fp32 rows of kHiddenSize), in place.
Op make_all_reduce(const ModelSpec& s, const std::string& x, const std::string& detail);
// Each all-reduce of a layer warms the weight of the projection after it (the next one reading
// 1 MiB or more, in this layer or the block's next) in L2 while the GPUs exchange x: the decode
// step's all-reduces are latency-bound (~14 µs for 16 KB on NVLink), the memory idle meanwhile.
void bind_warm_weights(Graph& g);
// A row-parallel projection: x += its product without tensor parallelism. With it, rank 0 adds its
// share (its heads' or features' columns) into the residual and every other rank stores its share
// in x, so the sum over the ranks, in place, is the residual plus the whole product: no buffer
// besides x and no kernel besides the projections and NCCL's. `reduce`: the all-reduce follows
// (else a later op adds more of the ranks' shares into x first, and then reduces).
void add_residual_projection(const ModelSpec& s, const Graph& g, std::vector<Op>& ops, const std::string& label,
                             const std::string& weight, const std::string& in, const std::string& k,
                             bool reduce = true);
std::string linear_out_name(LinearOut result);  // "LinearOut::add_f32"
std::string shape_init(const Op& op);           // "{.dim = kHiddenSize, .eps = kRmsNormEps}"
void check_bindings(const Graph& g);
void mark_matrix_weights(Graph& g);
void share_kernels(Graph& g);

void define_common_constants(const ModelSpec& s, Graph& g);  // sizes every family has; build choices; rope
void define_rope_constants(const ModelSpec& s, Graph& g);
void define_decode_attention_constants(const ModelSpec& s, Graph& g, const std::string& heads,
                                       const std::string& value_dim);
// Tensor parallelism: the name of the config size `origin` divided over the ranks, for comments.
std::string per_rank(const ModelSpec& s, const std::string& origin);
// A rank's rows (column-parallel projections, vocabulary shards; rank_group ranks share a slice),
// or its columns (row-parallel projections) of an HF tensor; the whole tensor with one rank.
WeightSource row_shard(const ModelSpec& s, const std::string& name, int64_t rows, int64_t hf_rows, int64_t hf_cols,
                       int64_t rank_group = 1);
WeightSource column_shard(const ModelSpec& s, const std::string& name, int64_t rows, int64_t cols, int64_t hf_cols);
void add_common_weights(const ModelSpec& s, Graph& g);       // embed_tokens
void add_final_weights(const ModelSpec& s, Graph& g);        // norm, lm_head (or tied)
void add_prologue_epilogue(const ModelSpec& s, Graph& g);    // embedding; final norm + LM head

void build_deepseek(const ModelSpec& s, Graph& g);

}  // namespace kiln::codegen
