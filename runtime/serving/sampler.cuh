// CUDA sampler kernel: one 512-thread block per row of logits, the definition of sampling_math.hpp.
//   pass 1           max, argmax (lowest id on ties), NaN/inf check. Greedy rows stop here.
//   passes 2-4       only with top-k or top-p: radix select over the 30-bit weight keys, 10 bits per
//                    pass, counting tokens (top-k) and summing integer mass (top-p) per digit in
//                    shared histograms. No sort, any vocabulary size.
//   pass 5           kept mass; the draw's target.
//   pass 6           prefix scan of kept mass in token-id order, tile by tile, stopping at the tile
//                    that holds the target.
//   (+1 pass for the logprob when asked)
// Weights are recomputed from the logits in each pass (L2-resident) instead of being stored.
#pragma once

#include <climits>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "runtime/serving/sampling_math.hpp"

namespace kiln::sampler_kernels {

constexpr int kThreads = 512;
constexpr int kRadixBits = 10;
constexpr int kBins = 1 << kRadixBits;
constexpr int kBinsPerThread = kBins / kThreads;
constexpr int kRadixLevels = 3;  // weights lie in [0, 1]: their keys fit in 30 bits
constexpr int kScanItems = 4;    // consecutive tokens per thread in the final scan
static_assert(kBins == kThreads * kBinsPerThread, "histogram bins split evenly over the threads");

using Mass = unsigned long long;  // atomicAdd and cub want this spelling of uint64_t

struct ArgMax {
  float value;
  int32_t index;
};

struct ArgMaxOp {
  __device__ ArgMax operator()(const ArgMax& a, const ArgMax& b) const {
    if (a.value != b.value) return a.value > b.value ? a : b;
    return a.index <= b.index ? a : b;
  }
};

using ArgMaxReduce = cub::BlockReduce<ArgMax, kThreads>;
using MassReduce = cub::BlockReduce<Mass, kThreads>;
using FloatReduce = cub::BlockReduce<float, kThreads>;
using MassScan = cub::BlockScan<Mass, kThreads>;

struct SharedStorage {
  union {
    ArgMaxReduce::TempStorage argmax;
    MassReduce::TempStorage mass_sum;
    FloatReduce::TempStorage float_sum;
    MassScan::TempStorage scan;
  } cub;
  unsigned int count_hist[kBins];  // top-k: tokens per digit
  Mass mass_hist[kBins];           // top-p: mass per digit
  ArgMax top;
  Mass value[2];
  uint32_t digit[2];
  int32_t token;
};

// One radix level: the largest digit d such that carry + (total of bins >= d) reaches target.
// Thread t holds bins kBins-1-t*kBinsPerThread downwards, so an inclusive scan over the threads'
// items is a suffix sum over bins.
template <typename Bin>
__device__ inline void select_digit(const Bin* hist, Mass target, Mass& carry, uint32_t& prefix, int shift,
                                    SharedStorage& s, int slot) {
  Mass value[kBinsPerThread], suffix[kBinsPerThread];
  for (int j = 0; j < kBinsPerThread; ++j) value[j] = hist[kBins - 1 - threadIdx.x * kBinsPerThread - j];
  MassScan(s.cub.scan).InclusiveSum(value, suffix);
  for (int j = 0; j < kBinsPerThread; ++j) {
    const Mass through = carry + suffix[j];
    if (through >= target && through - value[j] < target) {  // exactly one bin: the first to reach it
      s.digit[slot] = static_cast<uint32_t>(kBins - 1 - threadIdx.x * kBinsPerThread - j);
      s.value[slot] = through - value[j];
    }
  }
  __syncthreads();
  prefix |= s.digit[slot] << shift;
  carry = s.value[slot];
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(const float* __restrict__ logits, int64_t row_stride, int32_t vocab,
                       const SamplerRow* __restrict__ rows, SampleOutput* __restrict__ out) {
  __shared__ SharedStorage s;
  const int tid = threadIdx.x;
  const float* __restrict__ x = logits + static_cast<int64_t>(blockIdx.x) * row_stride;
  const SamplerRow row = rows[blockIdx.x];

  // Pass 1: max, argmax, finiteness.
  ArgMax best{-INFINITY, INT_MAX};
  int bad = 0;
  for (int i = tid; i < vocab; i += kThreads) {
    const float v = x[i];
    if (!isfinite(v)) {
      bad = 1;
    } else if (v > best.value) {
      best = ArgMax{v, i};
    }
  }
  if (__syncthreads_or(bad)) {
    if (tid == 0) out[blockIdx.x] = SampleOutput{-1, 0.0f, kSampleBadLogits};
    return;
  }
  const ArgMax top = ArgMaxReduce(s.cub.argmax).Reduce(best, ArgMaxOp{});
  if (tid == 0) s.top = top;
  __syncthreads();
  const float max_logit = s.top.value;
  int32_t token = s.top.index;

  if (!row_is_greedy(row)) {
    const float inv_temperature = div_rn(1.0f, row.temperature);
    uint32_t threshold = min_p_threshold(row);
    const bool use_k = row_uses_top_k(row, vocab);
    const bool use_p = row_uses_top_p(row);

    // Passes 2-4: radix select of the top-k and top-p thresholds, side by side.
    if (use_k || use_p) {
      uint32_t prefix_k = 0, prefix_p = 0;
      Mass carry_k = 0, carry_p = 0, need_p = 0;
      for (int level = 0; level < kRadixLevels; ++level) {
        const int shift = kRadixBits * (kRadixLevels - 1 - level);
        const uint32_t decided = ~0u << (shift + kRadixBits);  // key bits fixed by earlier levels
        for (int b = tid; b < kBins; b += kThreads) {
          s.count_hist[b] = 0;
          s.mass_hist[b] = 0;
        }
        __syncthreads();
        for (int i = tid; i < vocab; i += kThreads) {
          const uint32_t key = float_bits(sampling_weight(x[i], max_logit, inv_temperature));
          const uint32_t bin = (key >> shift) & (kBins - 1);
          if (use_k && (key & decided) == prefix_k) atomicAdd(&s.count_hist[bin], 1u);
          if (use_p && (key & decided) == prefix_p) {
            const Mass mass = key_mass(key);
            if (mass != 0) atomicAdd(&s.mass_hist[bin], mass);
          }
        }
        __syncthreads();
        if (use_p && level == 0) {
          Mass part = 0;
          for (int b = tid; b < kBins; b += kThreads) part += s.mass_hist[b];
          const Mass total = MassReduce(s.cub.mass_sum).Sum(part);
          if (tid == 0) s.value[1] = top_p_required_mass(row.top_p, total);
          __syncthreads();
          need_p = s.value[1];
          __syncthreads();
        }
        if (use_k) {
          select_digit(s.count_hist, static_cast<Mass>(row.top_k), carry_k, prefix_k, shift, s, 0);
        }
        if (use_p) select_digit(s.mass_hist, need_p, carry_p, prefix_p, shift, s, 1);
      }
      if (use_k) threshold = max(threshold, prefix_k);
      if (use_p) threshold = max(threshold, prefix_p);
    }

    // Pass 5: kept mass, then the target of the draw.
    Mass kept = 0;
    for (int i = tid; i < vocab; i += kThreads) {
      const float w = sampling_weight(x[i], max_logit, inv_temperature);
      if (float_bits(w) >= threshold) kept += weight_mass(w);
    }
    kept = MassReduce(s.cub.mass_sum).Sum(kept);
    if (tid == 0) s.value[0] = sample_target(philox_random64(row.seed, row.counter), kept);
    __syncthreads();
    const Mass target = s.value[0];

    // Pass 6: inverse CDF in token-id order.
    Mass running = 0;
    for (int base = 0; base < vocab; base += kThreads * kScanItems) {
      Mass mass[kScanItems];
      Mass mine = 0;
      for (int c = 0; c < kScanItems; ++c) {
        const int i = base + tid * kScanItems + c;
        mass[c] = 0;
        if (i < vocab) {
          const float w = sampling_weight(x[i], max_logit, inv_temperature);
          if (float_bits(w) >= threshold) mass[c] = weight_mass(w);
        }
        mine += mass[c];
      }
      Mass before, tile_total;
      MassScan(s.cub.scan).ExclusiveSum(mine, before, tile_total);
      if (running + tile_total > target) {  // the same decision in every thread
        const Mass local = target - running;
        if (local >= before && local < before + mine) {
          Mass through = before;
          for (int c = 0; c < kScanItems; ++c) {
            through += mass[c];
            if (through > local) {
              s.token = base + tid * kScanItems + c;
              break;
            }
          }
        }
        __syncthreads();
        token = s.token;
        break;
      }
      running += tile_total;
      __syncthreads();
    }
  }

  float logprob = 0.0f;
  if (row.want_logprob) {
    float part = 0.0f;
    for (int i = tid; i < vocab; i += kThreads) part += sampling_exp(x[i] - max_logit);
    const float sum = FloatReduce(s.cub.float_sum).Sum(part);
    if (tid == 0) logprob = (x[token] - max_logit) - logf(sum);
  }
  if (tid == 0) out[blockIdx.x] = SampleOutput{token, logprob, kSampleOk};
}

}  // namespace kiln::sampler_kernels
