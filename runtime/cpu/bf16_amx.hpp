// bf16 rows against fp32 activations on Intel AMX (Sapphire Rapids and later): the fast CPU
// backend's bf16 projections where the processor has AMX-BF16 and the kernel lets this process use
// its tiles. One tile product multiplies 16 rows × 32 columns by 32 columns × 16 tokens: 8,192
// products in one instruction, where an AVX-512 fused multiply-add makes 16.
//
// The weights are the tiles' first operand straight from their bf16 rows (16 rows × 32 columns);
// the activations, the second, go in as two bf16 parts, hi = bf16(x) and lo = bf16(x - hi),
// rearranged into the tiles' column-pair order once per call: the products see x to about 2^-17
// of itself (as the AVX-512 kernel's fp32 inputs, within 1e-10 of NMSE) rather than bf16's 2^-9.
// Every token count takes this path, one token as 512, and a token's sums are its own column of
// each tile: they are the same whatever shares its step. On 2 cores of a Xeon with AMX,
// Llama-3.2-1B's bf16 prefill runs 4× the AVX-512 kernel's tokens/s and decode as fast
// (bench/RESULTS.md).
#pragma once

#include <cstdint>

namespace kiln::cpu {

// Whether this path runs here (decided once).
bool amx_bf16_available();

// out[t·n + r] (=, or += with accumulate) Σ_c w[r·k + c] · in[t·k + c] for r < n, t < tokens; w
// bf16 rows. Only where amx_bf16_available().
void linear_bf16_amx(const float* in, const uint16_t* w, int64_t n, int64_t k, float* out, int64_t tokens, bool accumulate);

}  // namespace kiln::cpu
