// attention_prep then attention, fused (codegen/fuse.cpp): the prefill runs the two ops' kernels one
// after the other; the decode runs this kernel alone, where the per-op path launched three (prep,
// the split-KV partitions, their merge) in a chain whose every link costs a launch's latency.
//
// Grid: sequence × KV head × launched partition slots (`launched`, at most max_partitions). Block z
// of a (sequence, KV head) takes its partitions z, z + launched, z + 2·launched, … in turn. The
// kernel launched a block for every partition the model's context allows, most of them with
// nothing to do at short contexts: 64 sequences of a Llama-3.1-8B built with 64-token partitions
// (128 a sequence) took 9.48 ms a decode step that way, 7.50 with the slots sized (bench/RESULTS.md,
// 2026-11-29 twentieth session; at the default 16 partitions the empty blocks cost nothing
// measurable). The host sizes `launched` so that the grid fits on the GPU at once
// (prep_attention_launched_parts); a partition computes the same bits whichever block runs it.
// A block
//   - before its wait for qkv_proj (PDL), loads the new token's RoPE row into shared memory, its
//     first partition's page ids and its warps' first keys and values of the earlier tokens
//     (DecodePartition::begin);
//   - prepares its KV head's query heads (Qwen3's per-head norm, RoPE) into shared memory, and, when
//     it holds the partition with the new token, that token's k and v into the cache (attention_prep's
//     prep_head_vector: q is not written back, nothing after the decode reads it);
//   - attends each of its partitions (DecodePartition::finish, the new token's key and value read
//     back from the cache);
//   - when the sequence spans several partitions, counts its partitions done for its (sequence, KV
//     head), and the block that completes the count merges the partitions of its query heads
//     (split_kv_merge_row).
// The whole-step decode kernel (decode_step.cuh) runs the same three device functions, so a
// sequence gets the same bits either way, and the same as attention_prep + attention_decode.
//
// counters: [num_seqs × kv_heads] words, zero before the first launch; the merging block sets its
// word back to zero, so that every launch finds them so.
#pragma once

#include "templates/attention_decode.cuh"
#include "templates/attention_prep.cuh"

namespace kiln {

namespace detail {

// The K/V vectors in flight per lane of the build for kMinBlocksPerSm blocks an SM: 4, but 1 in the
// four-an-SM build, which holds 64 registers a thread (prep_attention_blocks_per_sm says when).
// 2 in the one- and two-an-SM builds ran 3-4% faster launched alone at short contexts, but made
// the decode step 1.2-2.5% slower (Qwen3-0.6B and Llama-3.2-1B, batches 1 and 8, H100): begin()'s
// first pass, requested before the PDL wait while qkv_proj still runs, is then half as many keys,
// and more of the context's loads wait on the projection (bench/RESULTS.md 2026-12-07, sixty-second session).
__host__ __device__ constexpr int prep_attention_unroll(int min_blocks_per_sm) { return min_blocks_per_sm == 4 ? 1 : 4; }

// (Plain template parameters: nvcc's launch stubs take no class-type ones.)
template <int kHeads, int kKvHeads, int kHeadDim, int kRow, int kPageSize, int kPartition, int kMaxPartitions,
          int kUnroll = 4>
struct PrepAttentionShape {
  static constexpr int kGroup = kHeads / kKvHeads;
  using Attn = DecodeShape<kHeads, kKvHeads, kHeadDim, kPageSize, kPartition, kMaxPartitions, kUnroll>;
  using Prep = HeadNormShape<kHeadDim, kRow>;
  static constexpr int kThreads = Attn::kThreads;
  static constexpr int kPrepGroups = kThreads / Prep::kLanes;  // head vectors prepared at once
  // Shared memory: the attention's, then the group's q heads, then the prep's staging rows, then
  // the RoPE row; the merge's factors (a float per partition, and one) reuse it from the start.
  static constexpr int kAttnBytes = round_up(Attn::kSmemBytes, 16);
  static constexpr int kQBytes = round_up(kGroup * kHeadDim * 2, 16);
  static constexpr int kStagedBytes = round_up(kPrepGroups * kHeadDim * 2, 16);
  static constexpr int kRopeBytes = round_up(kHeadDim / 2 * 8, 16);  // (cos, sin) float pairs
  // The attention's passes after the first through a ring of 3 in shared memory (DecodePartition's
  // kRing; vectors of 16 bytes only).
  static constexpr int kRing = Attn::kVec == 8 ? 3 : 0;
  using Partition = DecodePartition<kHeads, kKvHeads, kHeadDim, kPageSize, kPartition, kMaxPartitions, kRing, kUnroll>;
  static constexpr int kRingOffset = kAttnBytes + kQBytes + kStagedBytes + kRopeBytes;
  static constexpr int kSmemBytes = max_int(kRingOffset + Partition::kRingBytes, round_up((kMaxPartitions + 1) * 4, 16));
};

// kMinBlocksPerSm: the blocks an SM its registers are bounded for (2 or 4), or 0: unbounded (no
// .minnctapersm; the build as it was before there were two). prep_attention chooses.
template <int kHeads, int kKvHeads, int kHeadDim, int kRow, int kPageSize, bool kQkNorm, int kPartition,
          int kMaxPartitions, int kMinBlocksPerSm>
__global__ void __launch_bounds__(
    PrepAttentionShape<kHeads, kKvHeads, kHeadDim, kRow, kPageSize, kPartition, kMaxPartitions,
                       prep_attention_unroll(kMinBlocksPerSm)>::kThreads,
    kMinBlocksPerSm)
    prep_attention_decode_kernel(const bf16* __restrict__ qkv, const bf16* __restrict__ q_norm,
                                 const bf16* __restrict__ k_norm, float eps, const int* __restrict__ positions,
                                 const float* __restrict__ rope, const int* __restrict__ slot_mapping, bf16* cache,
                                 bf16* out, const int* __restrict__ context_len, const int* __restrict__ block_tables,
                                 int max_pages_per_seq, float scale_log2, float* scratch, unsigned* counters) {
  using Shape = PrepAttentionShape<kHeads, kKvHeads, kHeadDim, kRow, kPageSize, kPartition, kMaxPartitions,
                                   prep_attention_unroll(kMinBlocksPerSm)>;
  using Prep = typename Shape::Prep;
  constexpr int G = Shape::kGroup, D = kHeadDim;
  extern __shared__ float4 smem_f4[];
  char* smem = reinterpret_cast<char*>(smem_f4);
  float* attn_smem = reinterpret_cast<float*>(smem);
  bf16* q_group = reinterpret_cast<bf16*>(smem + Shape::kAttnBytes);
  bf16* staged = reinterpret_cast<bf16*>(smem + Shape::kAttnBytes + Shape::kQBytes);
  float2* rope_pairs = reinterpret_cast<float2*>(smem + Shape::kAttnBytes + Shape::kQBytes + Shape::kStagedBytes);
  __shared__ bool merges;

  const int seq = blockIdx.x, kv_head = blockIdx.y, launched = gridDim.z, tid = threadIdx.x;
  // Before the wait for the kernel before (qkv_proj): what no kernel of the step writes, which was
  // in place before that kernel started (common.cuh) — the step's arrays, the first partition's
  // page ids, and the keys and values of the earlier tokens; so these loads overlap the projection's end.
  const int parts = split_kv_parts<kPartition, kMaxPartitions>(context_len[seq]);
  int part = blockIdx.z;
  // The RoPE row, two dependent loads taken off the chain after the wait (positions, then the
  // row); begin()'s barrier publishes it (a block that attends nothing reads none of it).
  const float2* row = rope_row<D>(rope, positions[seq]);
  for (int i = tid; i < D / 2; i += Shape::kThreads) rope_pairs[i] = row[i];
  const bool holds_new = (parts - 1) % launched == part;  // the partition with the new token is ours
  typename Shape::Partition attention;
  auto* ring = reinterpret_cast<typename Shape::Partition::Bits*>(smem + Shape::kRingOffset);
  const bool attends = attention.begin(cache, context_len, block_tables, max_pages_per_seq, seq, kv_head, part,
                                       part == parts - 1, attn_smem, tid, [] { __syncthreads(); });
  pdl_release_and_wait();
  // Partition 0 runs even for an empty context (its output: zeros, as attention_decode's).
  if (!attends) return;

  // The group's q heads, and k and v of the new token in the block that holds its partition.
  const int vectors = G + (holds_new ? 2 : 0);
  const int group = tid / Prep::kLanes, lane = tid % Prep::kLanes;
  for (int v0 = 0; v0 < vectors; v0 += Shape::kPrepGroups) {
    const int i = v0 + group;
    const int vector = i < G ? kv_head * G + i : i == G ? kHeads + kv_head : kHeads + kKvHeads + kv_head;
    prep_head_vector<kHeads, kKvHeads, D, kRow, kPageSize, kQkNorm, Prep::kVec, Prep::kLanes>(
        qkv, q_group + (i < G ? i : 0) * D, q_norm, k_norm, eps, rope_pairs, slot_mapping, cache, seq, vector,
        i < vectors, lane, staged + group * D);
    __syncwarp();
  }
  __syncthreads();  // the q heads and the new k and v (read back from the cache below) are in place
  unsigned done = 0;
  for (;;) {
    attention.finish(q_group, cache, out, scale_log2, scratch, seq, kv_head, part, attn_smem, tid,
                     [] { __syncthreads(); }, ring);
    ++done;
    part += launched;
    if (part >= parts) break;
    __syncthreads();  // finish's reads of shared memory are done before begin's page ids land there
    // The cache holds the new token by now (written above, before a barrier): nothing to skip.
    attention.begin(cache, context_len, block_tables, max_pages_per_seq, seq, kv_head, part, false, attn_smem, tid,
                    [] { __syncthreads(); });
  }
  if (parts <= 1) return;  // finished in place (uniform over the block)

  // The partitions' slots are written; the block whose partitions complete the count merges.
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    unsigned* counter = counters + seq * kKvHeads + kv_head;
    merges = atomicAdd(counter, done) + done == static_cast<unsigned>(parts);
    if (merges) *counter = 0;  // every block of this (sequence, KV head) has counted
  }
  __syncthreads();
  if (!merges) return;
  __threadfence();  // the other blocks' slots, as they wrote them
  for (int g = 0; g < G; ++g) {
    split_kv_merge_row<D, kMaxPartitions, Shape::kThreads>(scratch, static_cast<long long>(seq) * kHeads + kv_head * G + g,
                                                          parts, out, attn_smem, tid, [] { __syncthreads(); });
    __syncthreads();  // the factors of this row are read before the next row's are written
  }
}

}  // namespace detail

// Decode scratch floats prep_attention<S> takes for max_batch sequences (attention_decode's).
template <shape::prep_attention S>
constexpr long long prep_attention_scratch_floats(int max_batch) {
  return split_kv_scratch_floats(static_cast<long long>(max_batch) * S.heads, S.max_partitions, S.head_dim);
}

// The most partitions a sequence's context is cut into (split_kv_partition_keys: past
// kSplitKvSpread, the partitions grow instead).
template <shape::prep_attention S>
constexpr int prep_attention_most_parts() {
  return detail::split_kv_most_parts<S.max_partitions>();
}

// Partition slots prep_attention launches per (sequence, KV head) for num_seqs sequences on a GPU
// that holds `resident` of its blocks at once: as many as fit beside the others (all, when they
// do; at least 1, at most prep_attention_most_parts; all when resident is unknown, 0). A function
// of the batch size alone, so a CUDA graph captured for a bucket stays right for any context lengths.
template <shape::prep_attention S>
constexpr int prep_attention_launched_parts(int num_seqs, int resident) {
  if (resident <= 0) return prep_attention_most_parts<S>();
  const long long pairs = static_cast<long long>(num_seqs) * S.kv_heads;
  const long long fit = resident / pairs;
  const int most = prep_attention_most_parts<S>();
  return fit < 1 ? 1 : fit > most ? most : static_cast<int>(fit);
}

// Blocks an SM prep_attention's kernel is built for, for num_seqs sequences on a GPU that holds
// `resident_one` blocks of the one-an-SM build (137-150 registers at Llama's and Qwen3-8B's heads):
// that build while it holds every partition of the batch at once (a block's chain of loads is
// shortest with its registers unbounded), the two-an-SM build (128 registers) beyond, where the
// batch's blocks come in waves. Llama-3.1-8B's heads (H200, bench_kernels --decode-attention): 64
// sequences took 31.1 µs a layer at 96 tokens of context and 191 at 1,024 one an SM, 22.6 and 125
// two; 8 sequences at 8,000, 168 and 116. Its decode step at 64 requests 6.91 → 6.64 ms; at 8
// short ones 4.26 → 4.30, the bounded build's longer chain a block (bench/RESULTS.md 2026-11-29,
// twenty-first session).
// Where the batch's (sequence, KV head) pairs are more than the two-an-SM build holds at once
// (`resident_two`), the four-an-SM build (`resident_four`, where it holds more), whose lanes have
// one K/V vector in flight instead of 4 (64 registers): twice the blocks, so twice the chains of
// dependent loads an SM, each longer. H100, one launch, best of two runs, µs, two an SM -> four
// (tools/bench/trace_attention, the same bits; bench/RESULTS.md 2026-12-07 sixty-first session):
// 64 sequences at 96 tokens Qwen3-0.6B's heads 24.96 -> 23.01, Llama-3.2-1B's 19.23 -> 15.01,
// Llama-3.1-8B's 25.66 -> 20.54; 64 at 600 Llama-3.1-8B's 92.10 -> 80.64; 256 at 160 Qwen3-0.6B's
// 90.88 -> 84.96; but 32 at 96 (256 pairs: one wave of two an SM) 14.69 -> 14.91.
template <shape::prep_attention S>
constexpr int prep_attention_blocks_per_sm(int num_seqs, int resident_one, int resident_two = 0,
                                           int resident_four = 0) {
  if (resident_one <= 0) return 1;
  const long long pairs = static_cast<long long>(num_seqs) * S.kv_heads;
  if (pairs * prep_attention_most_parts<S>() <= resident_one) return 1;
  return pairs > resident_two && resident_four > resident_two ? 4 : 2;
}

namespace detail {

template <shape::prep_attention S, int kMinBlocksPerSm>
constexpr auto prep_attention_kernel =
    prep_attention_decode_kernel<S.heads, S.kv_heads, S.head_dim, S.row, S.page_size, S.qk_norm, S.partition,
                                 S.max_partitions, kMinBlocksPerSm>;

template <shape::prep_attention S, int kMinBlocksPerSm>
using PrepAttentionShapeOf = PrepAttentionShape<S.heads, S.kv_heads, S.head_dim, S.row, S.page_size, S.partition,
                                                S.max_partitions, prep_attention_unroll(kMinBlocksPerSm)>;

// Blocks of build kMinBlocksPerSm the current GPU holds at once, its shared-memory limit raised
// first (the occupancy query counts with the limit the function has; 0 when unknown).
template <shape::prep_attention S, int kMinBlocksPerSm>
int prep_attention_resident_blocks() {
  using Shape = PrepAttentionShapeOf<S, kMinBlocksPerSm>;
  constexpr auto kernel = prep_attention_kernel<S, kMinBlocksPerSm>;
  allow_dynamic_smem_once<kernel, Shape::kSmemBytes>();
  return device_resident_blocks<kernel, Shape::kThreads, Shape::kSmemBytes>();
}

template <shape::prep_attention S, int kMinBlocksPerSm>
void launch_prep_attention(const bf16* qkv, const bf16* q_norm, const bf16* k_norm, const int* positions,
                           const float* rope, const int* slot_mapping, bf16* cache, bf16* out, const int* context_len,
                           const int* block_tables, int max_pages_per_seq, int num_seqs, float* scratch,
                           unsigned* counters, cudaStream_t stream, int launched_parts) {
  using Shape = PrepAttentionShapeOf<S, kMinBlocksPerSm>;
  constexpr auto kernel = prep_attention_kernel<S, kMinBlocksPerSm>;
  allow_dynamic_smem_once<kernel, Shape::kSmemBytes>();
  const int launched = launched_parts > 0 ? min_int(launched_parts, S.max_partitions)
                                           : prep_attention_launched_parts<S>(
                                                 num_seqs, prep_attention_resident_blocks<S, kMinBlocksPerSm>());
  KILN_LAUNCH(kernel, dim3(num_seqs, S.kv_heads, launched), Shape::kThreads, Shape::kSmemBytes, stream, qkv, q_norm,
              k_norm, S.eps, positions, rope, slot_mapping, cache, out, context_len, block_tables, max_pages_per_seq,
              S.scale * kLog2e, scratch, counters);
}

}  // namespace detail

// One token per sequence: sequence s's token is row s of qkv (positions[s], slot_mapping[s]), and
// it attends to context_len[s] cached keys, its own included. out [num_seqs, heads · head_dim];
// scratch: prep_attention_scratch_floats(num_seqs); counters: num_seqs × kv_heads words, zero.
// Tests pin the grid: launched_parts, its partition slots (0: sized from the GPU), blocks_per_sm,
// the kernel's build (1, 2 or 4; 0: prep_attention_blocks_per_sm, where the two-an-SM build spills
// nothing).
template <shape::prep_attention S>
void prep_attention(const bf16* qkv, const bf16* q_norm, const bf16* k_norm, const int* positions, const float* rope,
                    const int* slot_mapping, bf16* cache, bf16* out, const int* context_len, const int* block_tables,
                    int max_pages_per_seq, int num_seqs, float* scratch, unsigned* counters, cudaStream_t stream,
                    int launched_parts = 0, int blocks_per_sm = 0) {
  static_assert(S.heads > 0 && S.kv_heads > 0 && S.heads % S.kv_heads == 0,
                "prep_attention: query heads must be a multiple of KV heads");
  static_assert(S.head_dim > 0 && S.head_dim % 2 == 0 && S.page_size > 0 && S.partition > 0 && S.max_partitions > 0,
                "prep_attention: sizes must be positive, the head dim even");
  static_assert((S.heads + 2 * S.kv_heads) * S.head_dim <= S.row, "prep_attention: q, k and v heads must fit in a row");
  if (num_seqs <= 0) return;
  if (blocks_per_sm <= 0) {
    // The four-an-SM build keeps up to a few words in local memory (8 bytes of stack at Llama's
    // heads, none at Qwen3-0.6B's) and was faster so; more than that, and it is not used.
    constexpr int kFourLocalBytes = 32;
    const int resident_four = detail::kernel_local_bytes<detail::prep_attention_kernel<S, 4>>() <= kFourLocalBytes
                                  ? detail::prep_attention_resident_blocks<S, 4>()
                                  : 0;
    blocks_per_sm = detail::kernel_spills<detail::prep_attention_kernel<S, 2>>()
                        ? 1
                        : prep_attention_blocks_per_sm<S>(num_seqs, detail::prep_attention_resident_blocks<S, 0>(),
                                                          detail::prep_attention_resident_blocks<S, 2>(), resident_four);
  }
  const auto launch = blocks_per_sm == 1   ? detail::launch_prep_attention<S, 0>
                      : blocks_per_sm == 4 ? detail::launch_prep_attention<S, 4>
                                           : detail::launch_prep_attention<S, 2>;
  launch(qkv, q_norm, k_norm, positions, rope, slot_mapping, cache, out, context_len, block_tables, max_pages_per_seq,
         num_seqs, scratch, counters, stream, launched_parts);
}

}  // namespace kiln
