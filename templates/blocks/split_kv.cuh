// Split-KV decode attention (PagedAttention V2, FlashDecoding), the part both attention kernels
// share: a sequence's context is cut into partitions of `partition` keys; each partition's block
// writes a slot of scratch, and the merge kernel combines the slots of each (sequence, head).
//
// Scratch: one slot per (row = sequence · heads + head, partition) of value_dim + 2 floats:
//   [0, value_dim)  the partition's unnormalized output Σ p·v (scores in log2 units, p = 2^(s - max))
//   value_dim       its max score
//   value_dim + 1   its exp-sum Σ p
#pragma once

#include "templates/common.cuh"

namespace kiln {

// Floats of decode scratch for `rows` (sequence, head) rows: the size the generator's
// kDecodeScratchFloats must cover (checked in kernels.cu through each attention's own function).
__host__ __device__ constexpr long long split_kv_scratch_floats(long long rows, int max_partitions, int value_dim) {
  return rows * max_partitions * (value_dim + 2);
}

namespace detail {

// The slot of (row, part).
__device__ __forceinline__ float* split_kv_slot(float* scratch, long long row, int part, int max_partitions,
                                                int value_dim) {
  return scratch + (row * max_partitions + part) * (value_dim + 2);
}

// Merges the partitions of (sequence, head) row `row` (a sequence of `ctx` keys over `parts` > 1
// partitions) into out[row], by kThreads threads (tid: 0..kThreads-1) that `sync()` synchronizes;
// factor: kMaxPartitions + 1 shared floats. A warp finds the max and each partition's factor
// 2^(max_p - max), then every thread sums its output columns over the partitions in order. The
// merge kernel runs one per block; the whole-step decode kernel (decode_step.cuh) several.
template <int kValueDim, int kMaxPartitions, int kThreads, typename Sync>
__device__ __forceinline__ void split_kv_merge_row(const float* scratch, long long row, int parts, bf16* out,
                                                   float* factor, int tid, Sync&& sync) {
  constexpr int kSlot = kValueDim + 2;
  float* inv_total = factor + kMaxPartitions;
  const float* base = scratch + row * kMaxPartitions * kSlot;
  if (tid < 32) {
    float m = neg_inf();
    for (int p = tid; p < parts; p += 32) m = fmaxf(m, base[p * kSlot + kValueDim]);
    m = warp_max(m);
    float total = 0.0f;
    for (int p = tid; p < parts; p += 32) {
      const float f = exp2f(base[p * kSlot + kValueDim] - m);
      factor[p] = f;
      total += f * base[p * kSlot + kValueDim + 1];
    }
    total = warp_sum(total);
    if (tid == 0) *inv_total = total > 0.0f ? 1.0f / total : 0.0f;
  }
  sync();
  for (int c = tid; c < kValueDim; c += kThreads) {
    float v = 0.0f;
    for (int p = 0; p < parts; ++p) v += base[p * kSlot + c] * factor[p];
    out[row * kValueDim + c] = __float2bfloat16_rn(v * *inv_total);
  }
}

// kTile == 0 (the GQA decode): past kSplitKvSpread partitions of kPartition keys, the partitions
// grow instead (multiples of kSplitKvGrain keys) and stay kSplitKvSpread. 32 partitions over Llama's
// and Qwen3's 8 KV heads are 256 blocks, about what an H100 / H200 runs at once (two an SM, 264):
// more, and a block takes a second partition after its first, a second chain of page-table and
// first-key loads; Llama-3.1-8B at 32,000 tokens of context took 75.5 µs a layer in 63 partitions
// of 512 keys, 63.4 in 32 of 1,024 (H100, bench/RESULTS.md, 2026-12-05 forty-fourth session).
inline constexpr int kSplitKvSpread = 32;
inline constexpr int kSplitKvGrain = 64;

// Keys a partition of the GQA decode takes over a context of ctx keys (at most the build's).
template <int kPartition>
__host__ __device__ constexpr int split_kv_grown_keys(int ctx) {
  if (ctx <= kPartition * kSplitKvSpread) return kPartition;
  return kSplitKvGrain * ceil_div(ceil_div(ctx, kSplitKvGrain), kSplitKvSpread);
}

// The most keys a partition of the GQA decode takes (kTile == 0): what its scores' shared memory holds.
template <int kPartition, int kMaxPartitions>
__host__ __device__ constexpr int split_kv_max_partition_keys() {
  return split_kv_grown_keys<kPartition>(kPartition * kMaxPartitions);
}

// The most partitions the GQA decode cuts a context into: the tasks and slots its kernels launch.
template <int kMaxPartitions>
__host__ __device__ constexpr int split_kv_most_parts() {
  return kMaxPartitions < kSplitKvSpread ? kMaxPartitions : kSplitKvSpread;
}

// Keys per partition of a sequence of context_len keys. kTile == 0: kPartition keys, or more at
// contexts past kSplitKvSpread of them (above). kTile > 0: the context's tiles of kTile keys dealt
// evenly over at most kMaxPartitions partitions, so that a short context spans several blocks too
// (MLA decode, where one block serves every head of a sequence). Either way it depends on the
// context alone: a sequence's bits do not depend on its batch.
template <int kPartition, int kMaxPartitions, int kTile>
__device__ __forceinline__ int split_kv_partition_keys(int context_len) {
  if constexpr (kTile == 0) {
    return split_kv_grown_keys<kPartition>(min(context_len, kPartition * kMaxPartitions));
  } else {
    const int tiles = ceil_div(min(context_len, kPartition * kMaxPartitions), kTile);
    return kTile * max(1, ceil_div(tiles, kMaxPartitions));
  }
}

// The partitions a sequence of context_len keys spans (the context cut at the model's maximum).
template <int kPartition, int kMaxPartitions, int kTile = 0>
__device__ __forceinline__ int split_kv_parts(int context_len) {
  return ceil_div(min(context_len, kPartition * kMaxPartitions),
                  split_kv_partition_keys<kPartition, kMaxPartitions, kTile>(context_len));
}

// Merges the partitions of one (sequence, head) (grid: heads × sequences); sequences of one
// partition were finished by the partition kernel.
template <int kHeads, int kValueDim, int kPartition, int kMaxPartitions, int kTile>
__global__ void __launch_bounds__(128) split_kv_merge_kernel(const float* __restrict__ scratch,
                                                             const int* __restrict__ context_len,
                                                             bf16* __restrict__ out) {
  pdl_release_and_wait();
  __shared__ float factor[kMaxPartitions + 1];
  const int head = blockIdx.x, seq = blockIdx.y;
  const int parts = split_kv_parts<kPartition, kMaxPartitions, kTile>(context_len[seq]);
  if (parts <= 1) return;
  split_kv_merge_row<kValueDim, kMaxPartitions, 128>(scratch, static_cast<long long>(seq) * kHeads + head, parts, out,
                                                     factor, threadIdx.x, [] { __syncthreads(); });
}

// The merge of every (sequence, head) of a decode step whose sequences may span several partitions
// (kTile: split_kv_partition_keys').
template <int kHeads, int kValueDim, int kPartition, int kMaxPartitions, int kTile = 0>
inline void launch_split_kv_merge(const float* scratch, const int* context_len, bf16* out, int num_seqs,
                                  cudaStream_t stream) {
  if constexpr (kMaxPartitions > 1) {
    auto merge = split_kv_merge_kernel<kHeads, kValueDim, kPartition, kMaxPartitions, kTile>;
    KILN_LAUNCH(merge, dim3(kHeads, num_seqs), 128, 0, stream, scratch, context_len, out);
  }
}

}  // namespace detail

}  // namespace kiln
