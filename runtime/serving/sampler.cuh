// CUDA sampler kernel: the definition of sampling_math.hpp over rows of logits. sampler.cu says how
// rows are split over blocks; this file holds the kernel, written once for both layouts:
//   kSplit = false  one 512-thread block per row (large batches), everything in shared memory.
//   kSplit = true   `parts` blocks per row, each owning a contiguous slice of token ids; per-block
//                   partials meet in a device scratch, and the row's blocks wait for one another at a
//                   per-row barrier (a cooperative launch guarantees they are all resident).
// Phases, each a pass over the block's tokens (weights are recomputed from the logits, which stay in
// L1/L2, instead of being stored):
//   1  max, argmax (lowest id on ties), NaN/inf check. Greedy rows without a logprob end here.
//   2  only with top-k or top-p, three levels: radix select over the 30-bit weight keys, 10 bits per
//      level, counting tokens (top-k) and summing integer mass (top-p) per digit.
//   3  kept mass (and the exp sum of the logprob), then the draw: the inverse CDF lands in one slice,
//      which a prefix scan in token-id order resolves.
#pragma once

#include <climits>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "runtime/serving/sampling_math.hpp"

namespace kiln::sampler_kernels {

constexpr int kThreads = 512;
constexpr int kChunk = 4;  // consecutive tokens a thread takes at a time: one 16-byte load
constexpr int kTile = kThreads * kChunk;
constexpr int kRadixBits = 10;
constexpr int kBins = 1 << kRadixBits;
constexpr int kBinsPerThread = kBins / kThreads;
constexpr int kRadixLevels = 3;  // weights lie in [0, 1]: their keys fit in 30 bits
constexpr int kMaxParts = kThreads;  // the final combine hands each block's partial to one thread
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

// Device scratch of the split layout, carved by sampler.cu from one allocation made at
// SamplerWorkspace construction. Indexed by block (blockIdx.x) or by row of the batch.
struct Scratch {
  ArgMax* block_top;      // [blocks] the block's max and argmax; index -1: it saw NaN or ±inf
  Mass* block_kept;       // [blocks] kept mass of the block's slice
  float* block_exp_sum;   // [blocks] Σ exp(x - max) over the slice, for the logprob
  unsigned* count_hist;   // [rows][kRadixLevels][kBins] top-k: tokens per digit
  Mass* mass_hist;        // [rows][kRadixLevels][kBins] top-p: mass per digit
  unsigned* row_sync;     // [rows] barrier counters (low 31 bits 0 between barriers; zeroed once)
};

struct Params {
  const float* logits;
  int64_t row_stride;
  int32_t vocab;
  int32_t parts;  // blocks per row (1 for kSplit = false)
  int32_t slice;  // tokens per block, a multiple of kChunk (vocab for kSplit = false)
  const SamplerRow* rows;
  SampleOutput* out;
  Scratch scratch;
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
  // Mass is summed as two 32-bit words: shared-memory 32-bit atomics are native, 64-bit adds are
  // not everywhere, and the flat rows put thousands of tokens in a handful of bins.
  unsigned count_hist[kBins];
  unsigned mass_lo[kBins];
  unsigned mass_hi[kBins];
  ArgMax top;
  Mass value[2];
  uint32_t digit[2];
  int32_t token;
  int32_t part;
  int32_t flag;
};

// The tokens one block reads: [begin, end) of the row at x.
struct Slice {
  const float* __restrict__ x;
  int32_t begin;
  int32_t end;
  bool vector_loads;  // x is 16-byte aligned (begin is a multiple of kChunk)
};

// Tokens [c, c + kChunk) clipped to `end` into v; returns how many are valid.
__device__ inline int load_chunk(const Slice& s, int c, float (&v)[kChunk]) {
  if (s.vector_loads && c + kChunk <= s.end) {
    const float4 q = __ldg(reinterpret_cast<const float4*>(s.x + c));
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
    return kChunk;
  }
  int n = 0;
  for (int j = 0; j < kChunk; ++j) {
    v[j] = 0.0f;
    if (c + j < s.end) {
      v[j] = __ldg(s.x + c + j);
      ++n;
    }
  }
  return n;
}

// f(token id, logit) for this thread's tokens of the slice, ids increasing.
template <typename F>
__device__ inline void for_each_token(const Slice& s, F&& f) {
  for (int c = s.begin + kChunk * static_cast<int>(threadIdx.x); c < s.end; c += kTile) {
    float v[kChunk];
    const int n = load_chunk(s, c, v);
    for (int j = 0; j < kChunk; ++j) {
      if (j < n) f(c + j, v[j]);
    }
  }
}

// ---- Per-row synchronization of the split layout -------------------------------------------------
// The row's blocks each add to the row's counter once per barrier: part 0 adds 2^31 - (parts - 1),
// the others 1, so the top bit flips exactly when the last one arrives and the low bits return to
// 0 (cooperative_groups' grid barrier, per row). No reset between barriers or launches is needed.
__device__ inline unsigned row_arrival_add(int part, int parts) {
  return part == 0 ? 0x80000000u - static_cast<unsigned>(parts - 1) : 1u;
}

// Adds this block's arrival; returns the counter before it.
__device__ inline unsigned row_arrive(unsigned* counter, unsigned add) {
  unsigned old;
  asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], %2;" : "=r"(old) : "l"(counter), "r"(add) : "memory");
  return old;
}

__device__ inline bool top_bit_flipped(unsigned before, unsigned after) { return ((before ^ after) & 0x80000000u) != 0; }

// Every block of the row waits until all have arrived; their earlier global writes are visible after.
__device__ inline void row_barrier(unsigned* counter, int part, int parts) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned old = row_arrive(counter, row_arrival_add(part, parts));
    unsigned now;
    do {
      asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(now) : "l"(counter) : "memory");
    } while (!top_bit_flipped(old, now));
  }
  __syncthreads();
}

// True in the one block that arrives last (it sees every other block's writes); the others are
// done with the row and return.
__device__ inline bool row_arrive_last(unsigned* counter, int part, int parts, SharedStorage& s) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned add = row_arrival_add(part, parts);
    const unsigned old = row_arrive(counter, add);
    s.flag = top_bit_flipped(old, old + add);
  }
  __syncthreads();
  return s.flag != 0;
}

// ---- Histograms -----------------------------------------------------------------------------------
__device__ inline void add_mass(SharedStorage& s, uint32_t bin, Mass mass) {
  const auto low = static_cast<unsigned>(mass);
  auto high = static_cast<unsigned>(mass >> 32);
  const unsigned before = atomicAdd(&s.mass_lo[bin], low);
  if (before + low < before) ++high;  // this add wrapped the low word: carry into the high one
  if (high != 0) atomicAdd(&s.mass_hi[bin], high);
}

__device__ inline Mass shared_mass(const SharedStorage& s, int bin) {
  return (static_cast<Mass>(s.mass_hi[bin]) << 32) + s.mass_lo[bin];
}

// Thread t holds bins kBins-1-t*kBinsPerThread downwards, so an inclusive scan over the threads'
// items is a suffix sum over bins.
__device__ inline int thread_bin(int j) { return kBins - 1 - static_cast<int>(threadIdx.x) * kBinsPerThread - j; }

// One radix level: the largest digit d such that carry + (total of bins >= d) reaches target.
__device__ inline void select_digit(Mass (&value)[kBinsPerThread], Mass target, Mass& carry, uint32_t& prefix,
                                    int shift, SharedStorage& s, int slot) {
  Mass suffix[kBinsPerThread];
  MassScan(s.cub.scan).InclusiveSum(value, suffix);
  for (int j = 0; j < kBinsPerThread; ++j) {
    const Mass through = carry + suffix[j];
    if (through >= target && through - value[j] < target) {  // exactly one bin: the first to reach it
      s.digit[slot] = static_cast<uint32_t>(thread_bin(j));
      s.value[slot] = through - value[j];
    }
  }
  __syncthreads();
  prefix |= s.digit[slot] << shift;
  carry = s.value[slot];
  __syncthreads();
}

// ---- The draw -------------------------------------------------------------------------------------
// The first token of the slice whose inclusive prefix sum of kept mass, counted from `running`,
// exceeds target (running <= target < running + kept mass of the slice). Tile by tile, stopping at
// the tile that holds it; -1 if it is not in the slice (cannot happen for a consistent target).
__device__ inline int32_t find_draw(const Slice& slice, float max_logit, float inv_temperature, uint32_t threshold,
                                    Mass running, Mass target, SharedStorage& s) {
  for (int base = slice.begin; base < slice.end; base += kTile) {
    const int c = base + kChunk * static_cast<int>(threadIdx.x);
    Mass mass[kChunk] = {0, 0, 0, 0};
    Mass mine = 0;
    if (c < slice.end) {
      float v[kChunk];
      const int n = load_chunk(slice, c, v);
      for (int j = 0; j < kChunk; ++j) {
        if (j < n) {
          const float w = sampling_weight(v[j], max_logit, inv_temperature);
          if (float_bits(w) >= threshold) mass[j] = weight_mass(w);
        }
        mine += mass[j];
      }
    }
    Mass before, tile_total;
    MassScan(s.cub.scan).ExclusiveSum(mine, before, tile_total);
    if (running + tile_total > target) {  // the same decision in every thread
      const Mass local = target - running;
      if (local >= before && local < before + mine) {
        Mass through = before;
        for (int j = 0; j < kChunk; ++j) {
          through += mass[j];
          if (through > local) {
            s.token = c + j;
            break;
          }
        }
      }
      __syncthreads();
      return s.token;
    }
    running += tile_total;
    __syncthreads();
  }
  return -1;
}

// ---- The kernel -----------------------------------------------------------------------------------
template <bool kSplit>
__global__ void __launch_bounds__(kThreads, 2) sample_rows_kernel(const Params p) {
  __shared__ SharedStorage s;
  const int tid = static_cast<int>(threadIdx.x);
  const int row_id = static_cast<int>(blockIdx.x) / p.parts;
  const int part = static_cast<int>(blockIdx.x) - row_id * p.parts;
  const int row_first_block = row_id * p.parts;
  const SamplerRow row = p.rows[row_id];
  const float* __restrict__ x = p.logits + static_cast<int64_t>(row_id) * p.row_stride;
  const bool vector_loads = (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
  const Slice mine{x, part * p.slice, min(p.vocab, part * p.slice + p.slice), vector_loads};
  unsigned* const row_sync = kSplit ? p.scratch.row_sync + row_id : nullptr;

  const bool greedy = row_is_greedy(row);
  const bool use_k = !greedy && row_uses_top_k(row, p.vocab);
  const bool use_p = !greedy && row_uses_top_p(row);
  // Greedy rows without a logprob need phase 1 only: its combine is the row's last handoff.
  const bool phase_1_only = greedy && !row.want_logprob;

  if constexpr (kSplit) {
    // This launch's histograms start at zero; phase 1's barrier orders these stores before any add.
    if (use_k || use_p) {
      unsigned* count = p.scratch.count_hist + static_cast<int64_t>(row_id) * kRadixLevels * kBins;
      Mass* mass = p.scratch.mass_hist + static_cast<int64_t>(row_id) * kRadixLevels * kBins;
      for (int i = part * kThreads + tid; i < kRadixLevels * kBins; i += p.parts * kThreads) {
        count[i] = 0;
        mass[i] = 0;
      }
    }
  }

  // Phase 1: max, argmax, finiteness.
  ArgMax best{-INFINITY, INT_MAX};
  int bad = 0;
  for_each_token(mine, [&](int i, float v) {
    if (!isfinite(v)) {
      bad = 1;
    } else if (v > best.value) {  // ids increase within a thread: the lowest id keeps a tie
      best = ArgMax{v, i};
    }
  });
  bad = __syncthreads_or(bad);
  ArgMax top = ArgMaxReduce(s.cub.argmax).Reduce(best, ArgMaxOp{});
  bool writes_output = part == 0;
  if constexpr (kSplit) {
    if (tid == 0) p.scratch.block_top[blockIdx.x] = bad ? ArgMax{0.0f, -1} : top;
    if (phase_1_only) {
      if (!row_arrive_last(row_sync, part, p.parts, s)) return;
      writes_output = true;
    } else {
      row_barrier(row_sync, part, p.parts);
    }
    ArgMax theirs{-INFINITY, INT_MAX};
    int their_bad = 0;
    if (tid < p.parts) {
      const ArgMax* partial = p.scratch.block_top + row_first_block + tid;
      theirs.index = __ldcg(&partial->index);
      theirs.value = __ldcg(&partial->value);
      if (theirs.index < 0) {
        their_bad = 1;
        theirs = ArgMax{-INFINITY, INT_MAX};
      }
    }
    bad = __syncthreads_or(their_bad);
    top = ArgMaxReduce(s.cub.argmax).Reduce(theirs, ArgMaxOp{});
  }
  if (bad) {
    if (tid == 0 && writes_output) p.out[row_id] = SampleOutput{-1, 0.0f, kSampleBadLogits};
    return;
  }
  if (tid == 0) s.top = top;
  __syncthreads();
  const float max_logit = s.top.value;
  const int32_t argmax = s.top.index;
  if (phase_1_only) {
    if (tid == 0 && writes_output) p.out[row_id] = SampleOutput{argmax, 0.0f, kSampleOk};
    return;
  }

  // Phase 2: radix select of the top-k and top-p thresholds, side by side.
  const float inv_temperature = greedy ? 1.0f : div_rn(1.0f, row.temperature);
  uint32_t threshold = greedy ? 0u : min_p_threshold(row);
  if (use_k || use_p) {
    uint32_t prefix_k = 0, prefix_p = 0;
    Mass carry_k = 0, carry_p = 0, need_p = 0;
    for (int level = 0; level < kRadixLevels; ++level) {
      const int shift = kRadixBits * (kRadixLevels - 1 - level);
      const uint32_t decided = ~0u << (shift + kRadixBits);  // key bits fixed by earlier levels
      for (int b = tid; b < kBins; b += kThreads) {
        s.count_hist[b] = 0;
        s.mass_lo[b] = 0;
        s.mass_hi[b] = 0;
      }
      __syncthreads();
      for_each_token(mine, [&](int, float v) {
        const uint32_t key = float_bits(sampling_weight(v, max_logit, inv_temperature));
        const uint32_t bin = (key >> shift) & (kBins - 1);
        if (use_k && (key & decided) == prefix_k) atomicAdd(&s.count_hist[bin], 1u);
        if (use_p && (key & decided) == prefix_p) {
          const Mass mass = key_mass(key);
          if (mass != 0) add_mass(s, bin, mass);
        }
      });
      __syncthreads();
      Mass counts[kBinsPerThread], masses[kBinsPerThread];
      if constexpr (kSplit) {
        const int64_t offset = (static_cast<int64_t>(row_id) * kRadixLevels + level) * kBins;
        unsigned* row_count = p.scratch.count_hist + offset;
        Mass* row_mass = p.scratch.mass_hist + offset;
        for (int b = tid; b < kBins; b += kThreads) {
          if (use_k && s.count_hist[b] != 0) atomicAdd(&row_count[b], s.count_hist[b]);
          if (use_p) {
            const Mass mass = shared_mass(s, b);
            if (mass != 0) atomicAdd(&row_mass[b], mass);
          }
        }
        row_barrier(row_sync, part, p.parts);
        for (int j = 0; j < kBinsPerThread; ++j) {
          counts[j] = use_k ? __ldcg(&row_count[thread_bin(j)]) : 0;
          masses[j] = use_p ? __ldcg(&row_mass[thread_bin(j)]) : 0;
        }
      } else {
        for (int j = 0; j < kBinsPerThread; ++j) {
          counts[j] = s.count_hist[thread_bin(j)];
          masses[j] = shared_mass(s, thread_bin(j));
        }
      }
      if (use_p && level == 0) {
        Mass part_total = 0;
        for (int j = 0; j < kBinsPerThread; ++j) part_total += masses[j];
        const Mass total = MassReduce(s.cub.mass_sum).Sum(part_total);
        if (tid == 0) s.value[1] = top_p_required_mass(row.top_p, total);
        __syncthreads();
        need_p = s.value[1];
        __syncthreads();
      }
      if (use_k) select_digit(counts, static_cast<Mass>(row.top_k), carry_k, prefix_k, shift, s, 0);
      if (use_p) select_digit(masses, need_p, carry_p, prefix_p, shift, s, 1);
    }
    if (use_k) threshold = max(threshold, prefix_k);
    if (use_p) threshold = max(threshold, prefix_p);
  }

  // Phase 3: kept mass and the logprob's exp sum of the slice.
  Mass kept = 0;
  float exp_sum = 0.0f;
  for_each_token(mine, [&](int, float v) {
    if (!greedy) {
      const float w = sampling_weight(v, max_logit, inv_temperature);
      if (float_bits(w) >= threshold) kept += weight_mass(w);
    }
    if (row.want_logprob) exp_sum += sampling_exp(v - max_logit);
  });
  kept = MassReduce(s.cub.mass_sum).Sum(kept);
  __syncthreads();
  exp_sum = FloatReduce(s.cub.float_sum).Sum(exp_sum);  // both valid in thread 0

  // The draw lands in one slice: the one where the running kept mass passes the target.
  Slice drawn = mine;
  Mass kept_before = 0, kept_total = kept;
  if constexpr (kSplit) {
    if (tid == 0) {
      p.scratch.block_kept[blockIdx.x] = kept;
      p.scratch.block_exp_sum[blockIdx.x] = exp_sum;
    }
    if (!row_arrive_last(row_sync, part, p.parts, s)) return;
    const Mass their_kept = tid < p.parts ? __ldcg(&p.scratch.block_kept[row_first_block + tid]) : 0;
    const float their_sum = tid < p.parts ? __ldcg(&p.scratch.block_exp_sum[row_first_block + tid]) : 0.0f;
    Mass before;
    MassScan(s.cub.scan).ExclusiveSum(their_kept, before, kept_total);
    __syncthreads();
    exp_sum = FloatReduce(s.cub.float_sum).Sum(their_sum);
    if (!greedy) {
      const Mass target = sample_target(philox_random64(row.seed, row.counter), kept_total);
      if (tid < p.parts && target >= before && target - before < their_kept) {
        s.part = tid;
        s.value[0] = before;
      }
      __syncthreads();
      drawn.begin = s.part * p.slice;
      drawn.end = min(p.vocab, drawn.begin + p.slice);
      kept_before = s.value[0];
    }
  } else {
    if (tid == 0) s.value[0] = kept;
    __syncthreads();
    kept_total = s.value[0];
  }

  int32_t token = argmax;
  if (!greedy) {
    const Mass target = sample_target(philox_random64(row.seed, row.counter), kept_total);
    const int32_t drawn_token = find_draw(drawn, max_logit, inv_temperature, threshold, kept_before, target, s);
    // The top token always has key = bits(1.0f) >= threshold and mass 2^40, so the draw is found.
    if (drawn_token >= 0) token = drawn_token;
  }
  if (tid == 0) {
    float logprob = 0.0f;
    if (row.want_logprob) logprob = (__ldg(x + token) - max_logit) - logf(exp_sum);
    p.out[row_id] = SampleOutput{token, logprob, kSampleOk};
  }
}

}  // namespace kiln::sampler_kernels
