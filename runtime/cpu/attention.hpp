// Attention of the fast CPU backend: the reference's op (runtime/ref/ops.hpp attention: every
// token's causal softmax over its sequence's cached keys and values) over bf16 KV pages (the GPU's
// format: half the bytes of the reference's fp32 pages), written for the vectorizer (GCC's vector
// extension, 8 lanes): the scores of 8 keys at a time as 8 independent sums whose lanes are then
// summed together, the value sums 64 of the head dim at a time in registers over every key, the
// exponentials by a polynomial over the whole row of scores (std::exp is a call per score),
// compiled with -O3; a head dim that is not a multiple of 8 ends one value at a time. The query
// heads that share a KV head run up to 3 at a time, each key and value loaded once for them (GQA:
// SmolLM2-135M decode at 500-1,000 tokens of context 150-190 -> 158-206 tokens/s on 2 cores, the
// same tokens). Each (token, head) is computed the same whether it is in a prefill or a decode
// step, alone or batched, and whichever heads share its loads.
#pragma once

#include <cstdint>

#include "codegen/op_shapes.hpp"
#include "runtime/core/step_batch.hpp"
#include "templates/kv_layout.hpp"

namespace kiln::cpu {

// q: rows of s.row values (q heads first); cache: one layer's bf16 pages at `base` in `layout`;
// out: [tokens][heads × head_dim].
void attention(const shape::attention& s, const float* q, const uint16_t* base, const KvLayout& layout, float* out,
               const StepBatch& step);

}  // namespace kiln::cpu
