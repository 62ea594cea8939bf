// The block formats' dot products on Intel AMX-INT8 (Sapphire Rapids and later), for prefill: one
// tile product multiplies 16 tokens × 32 columns of the activations' 8-bit parts by 32 columns ×
// 16 rows of a block's quants, 8,192 products in one instruction where AVX-512 VNNI's vpdpbusd
// makes 64.
//
// The same integer sums as the AVX-512 VNNI kernel's (quant_dot_impl.hpp), a block and a part at
// a time, and then the same fp32 operations on them in the same order: the outputs are that
// kernel's bits, so a token's sums do not depend on which kernel ran or what shared its step.
// Whole tiles of 16 tokens run here; the rest, and a step of fewer tokens (decode), on AVX-512
// VNNI.
#pragma once

#include "runtime/cpu/quant_dot.hpp"

namespace kiln::cpu {

// Whether this path runs here: AMX-INT8 and AVX-512 VNNI, the tiles granted (decided once).
bool amx_int8_available();

// The kernel (quant_dot.hpp's DotKernel contract) for every block format (those with a scale per 16
// values, Q2_K, Q3_K and Q6_K, as two products of 16 columns a block); null where
// amx_int8_available() is false.
DotKernel dot_kernel_amx_int8();

}  // namespace kiln::cpu
