// The sampling definition, shared bit for bit by the CPU reference (sampler_cpu.cpp) and the CUDA
// kernel (sampler.cu). Every step is integer arithmetic or an fp32/fp64 operation that IEEE rounds
// exactly (no library exp, no float sums), so both sides pick the same token for the same logits.
//
// For one row of logits x[0..V) and its SamplerRow:
//   1. Any NaN or ±inf in x: the row's result is kSampleBadLogits (no token).
//   2. Greedy (temperature < kGreedyTemperature): the argmax, lowest token id on ties.
//   3. Otherwise, with m = max x and t = temperature:
//        e_i    = sampling_exp((x_i - m) * (1/t))     in [0, 1]; e = 1 for the top token
//        key_i  = the bits of e_i as uint32          (ordered like e_i, since e_i >= 0)
//        mass_i = floor(e_i * 2^40)                   (integer weight; probabilities are mass / Σmass)
//      The kept set is {i : key_i >= θ} with θ the largest of
//        min-p:  the key of min_p                 (p_i >= min_p * p_max, as e_max = 1)
//        top-k:  the k-th largest key, counted with multiplicity (every token tied with it is kept)
//        top-p:  the largest key τ whose upper set {key >= τ} holds mass >= ceil(top_p * Σ_all mass)
//                (every token tied with τ is kept; top_p is measured on the full distribution, so the
//                set is the intersection top-k ∩ top-p ∩ min-p, not top-p of the top-k renormalized)
//      Draw: r = philox_random64(seed, counter); target = floor(r * K / 2^64) with K the kept mass;
//      the token is the smallest id whose inclusive prefix sum of kept mass, in token-id order,
//      exceeds target (inverse CDF with u = r / 2^64).
//   4. logprob (when asked): the raw model log-probability of the chosen token,
//      (x_tok - m) - log(Σ_i exp(x_i - m)) at temperature 1 and before any filter (vLLM's default
//      "raw" logprobs); a float sum, so CPU and GPU agree to rounding, not bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/serving/philox.hpp"

#if defined(__CUDA_ARCH__) && defined(__USE_FAST_MATH__)
#error "sampling_math.hpp: --use_fast_math flushes subnormals and approximates division; the sampler would no longer match the CPU reference"
#endif

namespace kiln {

// One row's sampling inputs, laid out for copying to the device as is.
struct SamplerRow {
  float temperature = 1.0f;  // < kGreedyTemperature: greedy
  int32_t top_k = 0;         // 0 or >= V: off
  float top_p = 1.0f;        // (0, 1]; 1: off
  float min_p = 0.0f;        // [0, 1); 0: off
  uint64_t seed = 0;         // the request's seed
  uint64_t counter = 0;      // index of this sampled token within the request (0 for the first)
  int32_t want_logprob = 0;  // nonzero: compute SampleOutput::logprob
  int32_t top_logprobs = 0;  // [0, 20]: also the row's most likely tokens (sample_batch.hpp; the
                             // kernel of sampler.cuh ignores it)
};

enum SampleStatus : int32_t {
  kSampleOk = 0,
  kSampleBadLogits = 1,  // the row held NaN or ±inf
};

struct SampleOutput {
  int32_t token = -1;
  float logprob = 0.0f;
  int32_t status = kSampleOk;
};

// One entry of a row's top-N log-probabilities (most likely first; ties: lower id first).
struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

// Top-N log-probabilities per token at most (vLLM's default max_logprobs).
constexpr int32_t kMaxTopLogprobs = 20;

// Temperatures below this sample greedily: 1/t would overflow the scaled logits (vLLM uses 1e-5 too).
constexpr float kGreedyTemperature = 1e-5f;
// Mass resolution: a token's weight is floor(e * 2^40), so up to 2^23 tokens sum below 2^63.
constexpr int32_t kMassBits = 40;
constexpr int32_t kMaxSamplerVocab = 1 << 23;

KILN_HOST_DEVICE inline bool row_is_greedy(const SamplerRow& row) {
  return !(row.temperature >= kGreedyTemperature);
}
KILN_HOST_DEVICE inline bool row_uses_top_k(const SamplerRow& row, int32_t vocab) {
  return row.top_k > 0 && row.top_k < vocab;
}
KILN_HOST_DEVICE inline bool row_uses_top_p(const SamplerRow& row) { return row.top_p < 1.0f; }

KILN_HOST_DEVICE inline uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

KILN_HOST_DEVICE inline float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// a * b and a + b rounded on their own: nvcc would otherwise be free to fuse a product and a
// following sum into one fma, which rounds once and so differs from the host. (On the host no
// product here feeds a sum, so there is nothing for the compiler to fuse.)
KILN_HOST_DEVICE inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KILN_HOST_DEVICE inline float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

KILN_HOST_DEVICE inline float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);  // exact division even under -prec-div=false
#else
  return a / b;
#endif
}

// exp(d) for d <= 0, built only from operations IEEE rounds exactly (add, mul, fma, bit casts),
// so host and device produce the same bits; a library expf is free to differ by an ulp.
// Relative error about 1e-7. Below e^-80 it returns 0: such a token weighs nothing at the 2^-40
// mass resolution, and cutting there keeps every result a normal float (no subnormal rounding).
// All of it runs on the fma/integer pipes (no conversion instructions), as the GPU sampler
// evaluates it for every token in every pass.
KILN_HOST_DEVICE inline float sampling_exp(float d) {
  if (!(d > -80.0f)) return 0.0f;  // also catches -inf
  // k = round(d / ln 2) in [-116, 0]: adding 1.5 * 2^23 rounds to an integer (ties to even) and
  // leaves k in the low mantissa bits. One fma, so there is one rounding whatever the compiler
  // would have done with a separate product and sum.
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23
  const float shifted = fmaf(d, 1.44269504f, kRoundMagic);
  const float k = add_rn(shifted, -kRoundMagic);
  const int32_t k_int = static_cast<int32_t>(float_bits(shifted) - float_bits(kRoundMagic));
  float r = fmaf(-k, 0.693145751953125f, d);  // Cody-Waite: ln 2 = hi + lo, hi has 16 bits
  r = fmaf(-k, 1.428606765330187e-06f, r);    // |r| <= ~0.35
  float p = 1.0f / 5040.0f;                   // Taylor series of e^r to r^7
  p = fmaf(p, r, 1.0f / 720.0f);
  p = fmaf(p, r, 1.0f / 120.0f);
  p = fmaf(p, r, 1.0f / 24.0f);
  p = fmaf(p, r, 1.0f / 6.0f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  return mul_rn(p, bits_float(static_cast<uint32_t>(k_int + 127) << 23));
}

// The scaled weight e of token i: 1 for the top token, in [0, 1] for all.
KILN_HOST_DEVICE inline float sampling_weight(float logit, float max_logit, float inv_temperature) {
  return sampling_exp(mul_rn(logit - max_logit, inv_temperature));
}

// floor(e * 2^40) of the weight whose bits are `key`, in integer arithmetic. Weights are 0 or
// normal floats in [e^-80, 1], so e = 1.m * 2^E with E in [-116, 0].
KILN_HOST_DEVICE inline uint64_t key_mass(uint32_t key) {
  if (key == 0) return 0;
  const int32_t shift = static_cast<int32_t>(key >> 23) - 127 + kMassBits - 23;  // mass = significand * 2^shift
  const uint64_t significand = (key & 0x7FFFFFu) | 0x800000u;
  if (shift >= 0) return significand << shift;
  return shift > -24 ? significand >> -shift : 0;
}

KILN_HOST_DEVICE inline uint64_t weight_mass(float weight) { return key_mass(float_bits(weight)); }

KILN_HOST_DEVICE inline uint32_t min_p_threshold(const SamplerRow& row) {
  return row.min_p > 0.0f ? float_bits(row.min_p) : 0u;
}

// ceil(top_p * total) in fp64, clamped to [1, total]: the mass the top-p set must reach.
KILN_HOST_DEVICE inline uint64_t top_p_required_mass(float top_p, uint64_t total) {
  const double wanted = ceil(static_cast<double>(top_p) * static_cast<double>(total));
  if (!(wanted < static_cast<double>(total))) return total;
  const uint64_t required = static_cast<uint64_t>(wanted);
  return required < 1 ? 1 : required;
}

// floor(r * kept / 2^64): where the inverse CDF lands in [0, kept).
KILN_HOST_DEVICE inline uint64_t sample_target(uint64_t random, uint64_t kept_mass) {
#ifdef __CUDA_ARCH__
  return __umul64hi(random, kept_mass);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(random) * kept_mass) >> 64);
#endif
}

}  // namespace kiln
