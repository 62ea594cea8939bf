// Paged causal attention over the KV cache (ref::attention): the generated kernels.cu includes
// this file for both phases.
//   attention_prefill.cuh  any flat batch of new tokens (prompt chunks); FlashAttention-2 style
//   attention_decode.cuh   one new token per sequence; split-KV like PagedAttention V2
#pragma once

#include "templates/attention_decode.cuh"
#include "templates/attention_prefill.cuh"
