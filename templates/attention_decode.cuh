// Decode attention: one query token per sequence over its paged KV cache, split-KV like vLLM's
// PagedAttention V2.
//
// Pass 1 (grid: sequence × KV head × partition): a block takes one KV head with all the query
// heads that share it (GQA: K and V are read once for the group) and one partition of kPartition
// keys (more at long contexts: split_kv_partition_keys). It stores the scores in shared memory,
// takes their max and exp-sum per head, then sums p · v. A sequence that fits in one partition is
// finished there; otherwise the block writes its (max, exp-sum, unnormalized output) to scratch.
// Pass 2 (grid: head × sequence): merges the partitions of sequences longer than one partition
// (blocks/split_kv.cuh, shared with MLA decode).
//
// The grid depends only on num_seqs (CUDA graphs replay it with other context lengths): all
// kMaxPartitions partitions are launched and those past a sequence's end return at once.
// Scores are kept in log2 units (q is pre-scaled by scale · log2 e) so exp2 does the exponentials.
#pragma once

#include "templates/blocks/attention_paging.cuh"
#include "templates/blocks/mma.cuh"
#include "templates/blocks/split_kv.cuh"
#include "templates/common.cuh"

namespace kiln {

namespace detail {

// kPartition / kMaxPartitions: the build's partition and count (a partition's keys at long
// contexts grow up to kMaxKeys: split_kv_partition_keys).
// kUnrollSet: K/V vectors in flight per lane (prep_attention's four-an-SM build takes 1). A lane
// meets its keys in the same order whatever it is: the same sums, the same bits.
template <int kHeads, int kKvHeads, int kHeadDim, int kPageSize, int kPartition, int kMaxPartitions,
          int kUnrollSet = 4>
struct DecodeShape {
  static constexpr int kMaxKeys = split_kv_max_partition_keys<kPartition, kMaxPartitions>();
  static constexpr int kGroup = kHeads / kKvHeads;                  // query heads per KV head
  static constexpr int kVec = vec_width(kHeadDim, 2);               // bf16 per load (8: 16 bytes)
  static constexpr int kChunks = kHeadDim / kVec;                   // loads per K or V vector
  static constexpr int kLanesPerKey = min_int(32, pow2_ceil(kChunks));
  static constexpr int kChunksPerLane = ceil_div(kChunks, kLanesPerKey);
  static constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kKeysPerPass = kWarps * kKeysPerWarp;
  static constexpr int kUnroll = kUnrollSet;                        // K/V vectors in flight per lane
  static constexpr int kMaxPages = ceil_div(kMaxKeys, kPageSize) + 1;  // a partition may straddle pages
  // The scores' row stride: kMaxKeys (a multiple of 32) and one float per key a warp's pass stores
  // at once, so that the heads' scores of those keys fall in different banks (at kMaxKeys the 4
  // heads of a Llama group stored 4-way conflicted: ncu, H100, 2026-12-06).
  static constexpr int kScoreStride = kMaxKeys + kKeysPerWarp;
  // Shared memory: scores [kGroup][kScoreStride], later reused for the per-warp partial outputs
  // [kWarps][kGroup][kHeadDim]; then max and exp-sum per head; then the partition's page ids.
  static constexpr int kUnionFloats = max_int(kGroup * kScoreStride, kWarps * kGroup * kHeadDim);
  static constexpr int kSmemBytes = (kUnionFloats + 2 * kGroup) * 4 + kMaxPages * 4;
};

// One (sequence, KV head, partition) of pass 1, by kThreads threads (tid: 0..kThreads-1) that
// `sync()` synchronizes, in `smem` (Shape::kSmemBytes, 16-byte aligned), in two parts:
//   begin()   the partition's page ids into shared memory and each warp's first keys and values
//             into registers: nothing the step's kernels write, so a kernel may run it before its
//             wait for the kernel before (PDL), but the key `fresh` (the step's new token, when the
//             block writes it itself; -1: none), which finish() loads. False: nothing to attend
//             (a partition past the context; partition 0 always attends).
//   finish()  the scores, softmax and values over the group's query heads (q_group: head g at
//             q_group + g·kHeadDim).
// attention_decode_partition runs both at once. The per-op kernels run one partition per block; the
// whole-step decode kernel (decode_step.cuh) runs two per block, so all compute the same bits.
//
// kRing > 0: the passes after the first come through a ring of kRing passes in shared memory
// (ring_bytes(); each lane copies its own vectors with cp.async and reads only those, so no barrier
// guards it), kRing passes in flight while one is used, where the registers held one: at long
// contexts a block's chain of loads, not the bandwidth, bounded it. The same vectors meet the same
// sums in the same order: the bits are those of kRing = 0. kUnroll: DecodeShape's.
template <int kHeads, int kKvHeads, int kHeadDim, int kPageSize, int kPartition, int kMaxPartitions, int kRing = 0,
          int kUnroll = 4>
struct DecodePartition {
  using Shape = DecodeShape<kHeads, kKvHeads, kHeadDim, kPageSize, kPartition, kMaxPartitions, kUnroll>;
  using Layout = KvPageLayout<kKvHeads, kHeadDim, kPageSize>;
  static constexpr int G = Shape::kGroup, D = kHeadDim, V = Shape::kVec, CPL = Shape::kChunksPerLane;
  static constexpr int K = Shape::kScoreStride;  // the scores' row stride
  static constexpr int U = Shape::kUnroll;
  using Bits = typename BitsOf<V>::type;
  static_assert(kRing == 0 || sizeof(Bits) == 16, "DecodePartition: the ring copies 16-byte vectors");
  // Shared memory of the ring: [kRing][U][CPL][thread] vectors (a warp's lanes side by side).
  static constexpr int kRingBytes = kRing * U * CPL * Shape::kThreads * static_cast<int>(sizeof(Bits));

  int ctx = 0, keys = 0, start = 0, n = 0, first_page = 0, fresh = -1;  // keys: the partitions' size
  // The warp's first keys and values (keys first + u·kKeysPerPass + this lane's slot): at a short
  // context (one pass: 64 keys at head dim 128) the whole partition, so the values cost no round
  // trip to memory after the softmax.
  Bits first_keys[U][CPL] = {}, first_values[U][CPL] = {};

  __device__ __forceinline__ int* pages(float* smem) const {
    return reinterpret_cast<int*>(smem + Shape::kUnionFloats + 2 * G);  // [kMaxPages]
  }

  // Key (kv = 0) or value (kv = 1) vector `key` of the partition: this lane's chunks.
  __device__ __forceinline__ void load_vector(const bf16* cache, const int* page_ids, int kv_head, int key, int kv,
                                              int sub, Bits (&regs)[CPL]) const {
    const int pos = start + key;
    const bf16* vec = Layout::vec(cache, page_ids[pos / kPageSize - first_page], kv, kv_head, pos % kPageSize);
#pragma unroll
    for (int c = 0; c < CPL; ++c) {
      const int chunk = c * Shape::kLanesPerKey + sub;
      if (chunk < Shape::kChunks) regs[c] = load_bits<V>(vec + chunk * V);
    }
  }

  // Loads kUnroll key (kv = 0) or value (kv = 1) vectors of this lane's chunks from key `base` on;
  // keys past the partition's end, and `skip`, read nothing.
  __device__ __forceinline__ void load_vectors(const bf16* cache, const int* page_ids, int kv_head, int base, int kv,
                                               int skip, int lane, Bits (&regs)[U][CPL]) const {
    const int key_slot = lane / Shape::kLanesPerKey, sub = lane % Shape::kLanesPerKey;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int key = base + u * Shape::kKeysPerPass + key_slot;
      if (key < n && key != skip) load_vector(cache, page_ids, kv_head, key, kv, sub, regs[u]);
    }
  }

  // The scores' lane sums split the heads between lanes where the group is a power of two that
  // the key's lanes can share out.
  static constexpr bool kSplitHeads = G > 1 && (G & (G - 1)) == 0 && G <= Shape::kLanesPerKey;

  // The warps' partial outputs go to shared memory as 16-byte quads where a lane's chunk is 8
  // values: its first quad at chunk · 4, its second at D / 2 + chunk · 4, so that the lanes of one
  // store fill consecutive banks (stored value by value, a chunk's 8 floats apart, they conflicted
  // 4-way), and the sum reads each place of a row in order. The same sums, in the same order.
  static constexpr bool kQuadPartials = V == 8 && D % 16 == 0;

  // Keys a block's pass covers: kUnroll vectors a lane.
  static constexpr int kPassKeys = Shape::kKeysPerPass * U;

  // This thread's slot of vector (u, c) in ring stage `stage`.
  __device__ __forceinline__ static Bits* ring_slot(Bits* ring, int stage, int u, int c, int tid) {
    return ring + ((stage * U + u) * CPL + c) * Shape::kThreads + tid;
  }

  // Copies (cp.async, one commit group) this lane's vectors of pass `pass` (keys first + pass ·
  // kPassKeys on) into ring stage (pass - 1) % kRing; a pass past the partition copies nothing but
  // still commits, so that the count of groups in flight stays the same.
  __device__ __forceinline__ void ring_issue(const bf16* cache, const int* page_ids, int kv_head, int first, int pass,
                                             int passes, int kv, int lane, int tid, Bits* ring) const {
    if (pass < passes) {
      const int key_slot = lane / Shape::kLanesPerKey, sub = lane % Shape::kLanesPerKey;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int key = first + pass * kPassKeys + u * Shape::kKeysPerPass + key_slot;
        const int pos = start + key;
        const bf16* vec =
            key < n ? Layout::vec(cache, page_ids[pos / kPageSize - first_page], kv, kv_head, pos % kPageSize) : cache;
#pragma unroll
        for (int c = 0; c < CPL; ++c) {
          const int chunk = c * Shape::kLanesPerKey + sub;
          const bool valid = key < n && chunk < Shape::kChunks;
          cp_async_16(ring_slot(ring, (pass - 1) % kRing, u, c, tid), valid ? vec + chunk * V : cache, valid);
        }
      }
    }
    cp_async_commit();
  }

  // Pass `pass`'s vectors: the first from `first_regs` (begin()), later ones from the ring (their
  // copies waited for; the next one issued into the stage freed by the pass before) or, without a
  // ring, loaded here.
  __device__ __forceinline__ void pass_in(const bf16* cache, const int* page_ids, int kv_head, int first, int pass,
                                          int passes, int kv, int lane, int tid, Bits* ring,
                                          const Bits (&first_regs)[U][CPL], Bits (&regs)[U][CPL]) const {
    if (pass == 0) {
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int c = 0; c < CPL; ++c) regs[u][c] = first_regs[u][c];
    } else if constexpr (kRing > 0) {
      cp_async_wait<kRing - 1>();  // pass `pass` has landed (kRing groups were in flight)
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int c = 0; c < CPL; ++c) regs[u][c] = *ring_slot(ring, (pass - 1) % kRing, u, c, tid);
    } else {
      load_vectors(cache, page_ids, kv_head, first + pass * kPassKeys, kv, -1, lane, regs);
    }
  }

  // After pass `pass` is used: the ring's copy of pass `pass` + kRing, into the stage it freed.
  __device__ __forceinline__ void pass_done(const bf16* cache, const int* page_ids, int kv_head, int first, int pass,
                                            int passes, int kv, int lane, int tid, Bits* ring) const {
    if constexpr (kRing > 0) {
      if (pass > 0) ring_issue(cache, page_ids, kv_head, first, pass + kRing, passes, kv, lane, tid, ring);
    }
  }

  // The ring's first kRing passes (1..kRing) of keys (kv = 0) or values (kv = 1).
  __device__ __forceinline__ void ring_start(const bf16* cache, const int* page_ids, int kv_head, int first,
                                             int passes, int kv, int lane, int tid, Bits* ring) const {
    if constexpr (kRing > 0) {
      for (int pass = 1; pass <= kRing; ++pass) ring_issue(cache, page_ids, kv_head, first, pass, passes, kv, lane, tid, ring);
    }
  }

  template <typename Sync>
  __device__ __forceinline__ bool begin(const bf16* cache, const int* context_len, const int* block_tables,
                                        int max_pages_per_seq, int seq, int kv_head, int part, bool writes_new,
                                        float* smem, int tid, Sync&& sync) {
    ctx = min(context_len[seq], kMaxPartitions * kPartition);
    keys = split_kv_partition_keys<kPartition, kMaxPartitions, 0>(ctx);
    start = part * keys;
    if (part > 0 && start >= ctx) return false;
    n = max(0, min(keys, ctx - start));
    fresh = writes_new && n > 0 ? n - 1 : -1;
    first_page = start / kPageSize;
    const int num_pages = n > 0 ? (start + n - 1) / kPageSize - first_page + 1 : 0;
    int* page_ids = pages(smem);
    for (int i = tid; i < num_pages; i += Shape::kThreads) {
      page_ids[i] = block_tables[static_cast<long long>(seq) * max_pages_per_seq + first_page + i];
    }
    sync();
    const int warp = tid / 32, lane = tid % 32;
    load_vectors(cache, page_ids, kv_head, warp * Shape::kKeysPerWarp, 0, fresh, lane, first_keys);
    load_vectors(cache, page_ids, kv_head, warp * Shape::kKeysPerWarp, 1, fresh, lane, first_values);
    return true;
  }

  // ring: kRingBytes of shared memory (kRing > 0; not read otherwise).
  template <typename Sync>
  __device__ __forceinline__ void finish(const bf16* q_group, const bf16* cache, bf16* out, float scale_log2,
                                         float* scratch, int seq, int kv_head, int part, float* smem, int tid,
                                         Sync&& sync, Bits* ring = nullptr) {
    const bool single = ctx <= keys;
    float* scores = smem;                          // [G][K]
    float* partial = smem;                         // [kWarps][G][D], after the scores are used
    float* head_max = smem + Shape::kUnionFloats;  // [G]
    float* head_sum = head_max + G;                // [G]
    const int* page_ids = pages(smem);

    const int warp = tid / 32, lane = tid % 32;
    const int key_slot = lane / Shape::kLanesPerKey, sub = lane % Shape::kLanesPerKey;
    const int first = warp * Shape::kKeysPerWarp;
    // The new token's key and value, now that they are in the cache.
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (fresh >= 0 && first + u * Shape::kKeysPerPass + key_slot == fresh) {
        load_vector(cache, page_ids, kv_head, fresh, 0, sub, first_keys[u]);
        load_vector(cache, page_ids, kv_head, fresh, 1, sub, first_values[u]);
      }
    }

    // This lane's chunks of the group's queries, pre-scaled.
    float q[G][CPL][V];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const bf16* qh = q_group + g * D;
#pragma unroll
      for (int c = 0; c < CPL; ++c) {
        const int chunk = c * Shape::kLanesPerKey + sub;
        if (chunk < Shape::kChunks) {
          load_bf16<V>(qh + chunk * V, q[g][c]);
#pragma unroll
          for (int e = 0; e < V; ++e) q[g][c][e] *= scale_log2;
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e) q[g][c][e] = 0.0f;
        }
      }
    }

    // ---- scores: s[g][key] = q_g · k_key (log2 units) ----
    const int passes = n > first ? ceil_div(n - first, kPassKeys) : 0;
    ring_start(cache, page_ids, kv_head, first, passes, 0, lane, tid, ring);
    for (int pass = 0; pass < passes; ++pass) {
      const int base = first + pass * kPassKeys;
      Bits regs[U][CPL];
      pass_in(cache, page_ids, kv_head, first, pass, passes, 0, lane, tid, ring, first_keys, regs);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int key = base + u * Shape::kKeysPerPass + key_slot;
        float dot[G];
#pragma unroll
        for (int g = 0; g < G; ++g) dot[g] = 0.0f;
        if (key < n) {
#pragma unroll
          for (int c = 0; c < CPL; ++c) {
            if (c * Shape::kLanesPerKey + sub < Shape::kChunks) {
              float k[V];
              unpack_bf16<V>(regs[u][c], k);
#pragma unroll
              for (int g = 0; g < G; ++g) {
#pragma unroll
                for (int e = 0; e < V; ++e) dot[g] += q[g][c][e] * k[e];
              }
            }
          }
        }
        if constexpr (kSplitHeads) {
          // Each halving step of the key's lanes also halves the heads a lane keeps (it sends the
          // other half to its partner): G - 1 + log2(lanes / G) shuffles where G · log2(lanes) were.
#pragma unroll
          for (int offset = Shape::kLanesPerKey / 2, heads = G; heads > 1; offset /= 2, heads /= 2) {
            const bool upper = (sub & offset) != 0;
#pragma unroll
            for (int h = 0; h < heads / 2; ++h) {
              const float keep = upper ? dot[h + heads / 2] : dot[h], send = upper ? dot[h] : dot[h + heads / 2];
              dot[h] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
            }
          }
#pragma unroll
          for (int offset = Shape::kLanesPerKey / (2 * G); offset > 0; offset /= 2) {
            dot[0] += __shfl_xor_sync(0xffffffffu, dot[0], offset);
          }
          // Lane sub holds head (sub / (lanes / G)) read bit by bit from the top: the halves it kept.
          constexpr int kSpan = Shape::kLanesPerKey / G;
          if (sub % kSpan == 0 && key < n) scores[(sub / kSpan) * K + key] = dot[0];
        } else {
#pragma unroll
          for (int g = 0; g < G; ++g) {
#pragma unroll
            for (int offset = Shape::kLanesPerKey / 2; offset > 0; offset /= 2) {
              dot[g] += __shfl_xor_sync(0xffffffffu, dot[g], offset);
            }
          }
          if (sub == 0 && key < n) {
#pragma unroll
            for (int g = 0; g < G; ++g) scores[g * K + key] = dot[g];
          }
        }
      }
      pass_done(cache, page_ids, kv_head, first, pass, passes, 0, lane, tid, ring);
    }
    // The values' first ring passes go out now, so that their loads overlap the softmax: this lane
    // is done with its ring slots (each lane reads only its own).
    ring_start(cache, page_ids, kv_head, first, passes, 1, lane, tid, ring);
    sync();

    // ---- softmax numerators per head: p = exp2(s - max), with the max and the sum kept ----
    for (int g = warp; g < G; g += Shape::kWarps) {
      float m = neg_inf();
      for (int i = lane; i < n; i += 32) m = fmaxf(m, scores[g * K + i]);
      m = warp_max(m);
      float l = 0.0f;
      for (int i = lane; i < n; i += 32) {
        const float p = exp2f(scores[g * K + i] - m);
        scores[g * K + i] = p;
        l += p;
      }
      l = warp_sum(l);
      if (lane == 0) {
        head_max[g] = m;
        head_sum[g] = l;
      }
    }
    sync();

    // ---- values: o[g] = Σ p[g][key] · v_key ----
    float acc[G][CPL][V];
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int c = 0; c < CPL; ++c)
#pragma unroll
        for (int e = 0; e < V; ++e) acc[g][c][e] = 0.0f;
    for (int pass = 0; pass < passes; ++pass) {
      const int base = first + pass * kPassKeys;
      Bits regs[U][CPL];
      pass_in(cache, page_ids, kv_head, first, pass, passes, 1, lane, tid, ring, first_values, regs);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int key = base + u * Shape::kKeysPerPass + key_slot;
        if (key < n) {
#pragma unroll
          for (int c = 0; c < CPL; ++c) {
            if (c * Shape::kLanesPerKey + sub < Shape::kChunks) {
              float v[V];
              unpack_bf16<V>(regs[u][c], v);
#pragma unroll
              for (int g = 0; g < G; ++g) {
                const float p = scores[g * K + key];
#pragma unroll
                for (int e = 0; e < V; ++e) acc[g][c][e] += p * v[e];
              }
            }
          }
        }
      }
      pass_done(cache, page_ids, kv_head, first, pass, passes, 1, lane, tid, ring);
    }
    // Lanes holding the same chunks of different keys combine; then the warps combine in shared memory.
#pragma unroll
    for (int offset = Shape::kLanesPerKey; offset < 32; offset *= 2) {
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int c = 0; c < CPL; ++c)
#pragma unroll
          for (int e = 0; e < V; ++e) acc[g][c][e] += __shfl_xor_sync(0xffffffffu, acc[g][c][e], offset);
    }
    sync();  // everyone is done with the scores: their space becomes `partial`
    if (key_slot == 0) {
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int c = 0; c < CPL; ++c) {
          const int chunk = c * Shape::kLanesPerKey + sub;
          if (chunk < Shape::kChunks) {
            float* row = partial + (warp * G + g) * D;
            if constexpr (kQuadPartials) {  // the lane's two quads of its chunk, each among its neighbours'
              *reinterpret_cast<float4*>(row + chunk * 4) =
                  make_float4(acc[g][c][0], acc[g][c][1], acc[g][c][2], acc[g][c][3]);
              *reinterpret_cast<float4*>(row + D / 2 + chunk * 4) =
                  make_float4(acc[g][c][4], acc[g][c][5], acc[g][c][6], acc[g][c][7]);
            } else {
#pragma unroll
              for (int e = 0; e < V; ++e) row[chunk * V + e] = acc[g][c][e];
            }
          }
        }
    }
    sync();

    for (int i = tid; i < G * D; i += Shape::kThreads) {
      const int g = i / D, at = i % D;  // `at`: the place in a partial row; d: the output it holds
      const int d = kQuadPartials ? (at % (D / 2)) / 4 * V + (at / (D / 2)) * 4 + at % 4 : at;
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < Shape::kWarps; ++w) o += partial[(w * G + g) * D + at];
      const int head = kv_head * G + g;
      if (single) {
        const float l = head_sum[g];
        out[static_cast<long long>(seq) * kHeads * D + head * D + d] = __float2bfloat16_rn(l > 0.0f ? o / l : 0.0f);
      } else {
        float* slot = split_kv_slot(scratch, static_cast<long long>(seq) * kHeads + head, part, kMaxPartitions, D);
        slot[d] = o;
        if (d == 0) {
          slot[D] = head_max[g];
          slot[D + 1] = head_sum[g];
        }
      }
    }
  }
};

// Both parts at once: the whole of pass 1 for a block whose cache already holds the new token.
template <int kHeads, int kKvHeads, int kHeadDim, int kPageSize, int kPartition, int kMaxPartitions, typename Sync>
__device__ __forceinline__ void attention_decode_partition(const bf16* q_group, const bf16* cache, bf16* out,
                                                           const int* context_len, const int* block_tables,
                                                           int max_pages_per_seq, float scale_log2, float* scratch,
                                                           int seq, int kv_head, int part, float* smem, int tid,
                                                           Sync&& sync) {
  DecodePartition<kHeads, kKvHeads, kHeadDim, kPageSize, kPartition, kMaxPartitions> p;
  if (!p.begin(cache, context_len, block_tables, max_pages_per_seq, seq, kv_head, part, false, smem, tid, sync)) return;
  p.finish(q_group, cache, out, scale_log2, scratch, seq, kv_head, part, smem, tid, sync);
}

template <int kHeads, int kKvHeads, int kHeadDim, int kPageSize, int kRow, int kPartition, int kMaxPartitions>
__global__ void __launch_bounds__(DecodeShape<kHeads, kKvHeads, kHeadDim, kPageSize, kPartition, kMaxPartitions>::kThreads)
    attention_decode_partition_kernel(const bf16* __restrict__ q_rows, const bf16* __restrict__ cache,
                                      bf16* __restrict__ out, const int* __restrict__ context_len,
                                      const int* __restrict__ block_tables, int max_pages_per_seq, float scale_log2,
                                      float* __restrict__ scratch) {
  pdl_release_and_wait();
  constexpr int G = kHeads / kKvHeads;
  extern __shared__ float4 smem_f4[];
  const int seq = blockIdx.x, kv_head = blockIdx.y, part = blockIdx.z;
  attention_decode_partition<kHeads, kKvHeads, kHeadDim, kPageSize, kPartition, kMaxPartitions>(
      q_rows + static_cast<long long>(seq) * kRow + kv_head * G * kHeadDim, cache, out, context_len, block_tables,
      max_pages_per_seq, scale_log2, scratch, seq, kv_head, part, reinterpret_cast<float*>(smem_f4), threadIdx.x,
      [] { __syncthreads(); });
}

}  // namespace detail

// Decode scratch a batch of max_batch sequences needs (the generator's kDecodeScratchFloats).
template <shape::attention S>
constexpr long long attention_decode_scratch_floats(int max_batch) {
  return split_kv_scratch_floats(static_cast<long long>(max_batch) * S.heads, S.max_partitions, S.head_dim);
}

// q of sequence s, head h at q_rows + s·row + h·head_dim; out [num_seqs, heads·head_dim].
// Sequence s attends to its context_len[s] cached keys (its new token's included: attention_prep
// ran). scratch: attention_decode_scratch_floats(num_seqs) floats. Contexts longer than
// max_partitions · partition (the model's max context) are cut there.
template <shape::attention S>
void attention_decode(const bf16* q_rows, const bf16* cache, bf16* out, const int* context_len,
                      const int* block_tables, int max_pages_per_seq, int num_seqs, float* scratch,
                      cudaStream_t stream) {
  constexpr int kHeads = S.heads, kKvHeads = S.kv_heads, kHeadDim = S.head_dim, kPageSize = S.page_size;
  constexpr int kRow = S.row, kPartition = S.partition, kMaxPartitions = S.max_partitions;
  static_assert(kHeads > 0 && kKvHeads > 0 && kHeads % kKvHeads == 0,
                "attention_decode: query heads must be a multiple of KV heads");
  static_assert(kHeadDim > 0 && kPageSize > 0 && kPartition > 0 && kMaxPartitions > 0,
                "attention_decode: sizes must be positive");
  static_assert(kHeads * kHeadDim <= kRow, "attention_decode: q heads must fit in a row");
  using Shape = detail::DecodeShape<kHeads, kKvHeads, kHeadDim, kPageSize, kPartition, kMaxPartitions>;
  if (num_seqs <= 0) return;
  constexpr auto partition_kernel =
      detail::attention_decode_partition_kernel<kHeads, kKvHeads, kHeadDim, kPageSize, kRow, kPartition,
                                                kMaxPartitions>;
  detail::allow_dynamic_smem_once<partition_kernel, Shape::kSmemBytes>();
  const dim3 grid(num_seqs, kKvHeads, kMaxPartitions);
  KILN_LAUNCH(partition_kernel, grid, Shape::kThreads, Shape::kSmemBytes, stream, q_rows, cache, out, context_len,
              block_tables, max_pages_per_seq, S.scale * detail::kLog2e, scratch);
  detail::launch_split_kv_merge<kHeads, kHeadDim, kPartition, kMaxPartitions>(scratch, context_len, out, num_seqs,
                                                                              stream);
}

}  // namespace kiln
