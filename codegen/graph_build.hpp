// Pieces shared by the per-family graph builders (graph_build.cpp, graph_build_deepseek.cpp).
#pragma once

#include <string>

#include "codegen/graph.hpp"

namespace kiln::codegen {

std::string fmt_real(double v);                     // shortest faithful text of a config number
std::string num(int64_t v);
std::string hf_layer(const std::string& suffix);    // "model.layers.{L}." + suffix

// `dim`, `n`, `k` name constants of `g`.
Op make_rmsnorm(const Graph& g, const std::string& weight, const std::string& in, const std::string& out,
                const std::string& dim);
// RoPE in place over `heads` vectors per row of `buffer` (vector h at offset + h·head_stride);
// `offset` names a constant, or is empty for 0.
Op make_rope(const Graph& g, const std::string& label, const std::string& buffer, const std::string& math,
             const std::string& heads, const std::string& head_stride, const std::string& rotary_dim,
             const std::string& row, const std::string& offset, bool interleaved, const std::string& kernel);
Op make_linear(const Graph& g, const std::string& label, const std::string& weight, const std::string& in,
               const std::string& out, const std::string& n, const std::string& k, Epilogue epilogue,
               const std::string& detail);

void define_common_constants(const ModelSpec& s, Graph& g);  // sizes every family has; build choices; rope
void define_rope_constants(const ModelSpec& s, Graph& g);
void define_decode_attention_constants(const ModelSpec& s, Graph& g, const std::string& heads,
                                       const std::string& value_dim);
void add_common_weights(const ModelSpec& s, Graph& g);       // embed_tokens
void add_final_weights(const ModelSpec& s, Graph& g);        // norm, lm_head (or tied)
void add_prologue_epilogue(const ModelSpec& s, Graph& g);    // embedding; final norm + LM head

void build_deepseek(const ModelSpec& s, Graph& g);

}  // namespace kiln::codegen
