// bf16 rows against bf16 activations on AVX-512 BF16 (AMD Zen 4 and later, Intel Cooper Lake and
// Sapphire Rapids): the fast CPU backend's bf16 projections where the processor has vdpbf16ps but
// no AMX. One vdpbf16ps multiplies 32 bf16 weights by 32 bf16 activations into 16 fp32 sums, twice
// the products of an fp32 fused multiply-add, with no widening of the weights.
//
// The activations are rounded to bf16 once per call (nearest even), as the GPU's bf16 GEMV and
// cuBLASLt take them: the products see x to 2^-9 of itself (about 1e-6 of NMSE against the fp32
// reference; DESIGN.md allows bf16 matmuls 5e-4). A second bf16 part for the remainder, as the AMX
// path keeps, would halve prefill's products per instruction, and the AVX-512 fp32 kernel it
// replaces already ran at half llama.cpp's bf16 prefill (bench/RESULTS.md). Every token count takes
// the same sums in the same order: a token's outputs are the same bits whatever shares its step.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::cpu {

// Whether this path runs here (decided once): AVX-512 F, BW and BF16.
bool avx512_bf16_available();

// out[t·n + r] (=, or += with accumulate) Σ_c w[r·k + c] · bf16(in[t·k + c]) for r < n, t < tokens;
// w bf16 rows of k values. Only where avx512_bf16_available().
void linear_bf16_avx512(const float* in, const uint16_t* w, int64_t n, int64_t k, float* out, int64_t tokens,
                        bool accumulate);

// Whether the packed bf16 rows (runtime/cpu/bf16_pack.hpp) have a kernel here: the above, and
// AVX-512 VBMI's byte permutation to unpack the 12-bit codes. Where there is no AMX (whose bf16
// kernel reads plain rows) the loader packs the fast CPU backend's bf16 projections then.
bool packed_bf16_available();

// linear_bf16_avx512 of the same values, packed (an [n, k] matrix of bf16_pack.hpp's layout): the
// same sums in the same order, so the same bits. Only where packed_bf16_available().
void linear_bf16_packed_avx512(const float* in, const std::byte* w, int64_t n, int64_t k, float* out, int64_t tokens,
                               bool accumulate);

}  // namespace kiln::cpu
