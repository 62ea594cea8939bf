// Attention of the fast CPU backend: the reference's op (runtime/ref/ops.hpp attention: every
// token's causal softmax over its sequence's cached keys and values, fp32 KV pages), written for
// the vectorizer: dots and the value sums 16 lanes at a time (GCC's vector extension), held in
// registers over the keys of a page, the exponentials by a polynomial over the whole row of
// scores (std::exp is a call per score), compiled with -O3. Head dims of whole 16s (every family's:
// 64, 128); ref::attention keeps the others. Each (token, head) is computed the same whether it is in a prefill or a
// decode step, alone or batched.
#pragma once

#include <cstdint>

#include "codegen/op_shapes.hpp"
#include "runtime/core/step_batch.hpp"
#include "templates/kv_layout.hpp"

namespace kiln::cpu {

// q: rows of s.row values (q heads first); cache: one layer's pages at `base` in `layout`; out:
// [tokens][heads × head_dim]. s.head_dim a multiple of 16.
void attention(const shape::attention& s, const float* q, const float* base, const KvLayout& layout, float* out,
               const StepBatch& step);

}  // namespace kiln::cpu
