// MLA prefill with the keys and values expanded from the latent cache (runtime/cuda/mla_expanded.hpp
// drives it; decode keeps the absorbed form, mla_attention.cuh).
//
// Absorbed, a (query, key) pair of a head costs 2·(2·latent + rope) FLOPs (scores over latent + rope
// values, the output over latent); expanded, 2·(nope + rope + v). Expanding a key costs
// 2·latent·(nope + v) per head, and saves the same per query (W_UKᵀ·q_nope and W_UV·o_latent). So a
// chunk of C new tokens over N keys pays when 2·(2·latent - nope - v)·C·N > 2·latent·(nope + v)·(N - C):
// always for a fresh prompt (N = C), and once C > latent·(nope + v) / (2·latent - nope - v) new tokens
// over a long cached context (DeepSeek-V2: 512·256 / 768 ≈ 171). A decode step (C = 1) never pays.
//
// Per group of sequences whose keys fit the workspace, the driver runs:
//   mla_expand_gather   each sequence's latent rows (c_kv | k_rope) out of the paged cache into
//                       dense rows, sequence after sequence (a sequence's keys start at the sum of
//                       the context lengths before it)
//   two GEMMs           k_nope = c_kv · W_UKᵀ, v = c_kv · W_UVᵀ (cuBLASLt), bf16 as HF rounds them
//   mla_expanded_attention  causal attention per head over [k_nope | k_rope] and v: the dense
//                       prefill kernels (attention_prefill.cuh's launch_prefill) over an ExpandedKv
// A token's result depends on its own sequence's keys only, whatever else shares the step.
#pragma once

#include "templates/attention_prefill.cuh"
#include "templates/common.cuh"
#include "templates/kv_layout.hpp"

namespace kiln {

// The workspace of one group: [keys] rows of c_kv, k_rope, k_nope (all heads) and v (all heads),
// one region after the other; S.keys is a multiple of 8, so every region is 16-byte aligned. The
// generator sizes it as kMlaExpandedKeys × kMlaExpandedValuesPerKey bf16 values.
template <shape::mla_attention_expanded S>
struct MlaExpanded {
  static_assert(S.keys > 0 && S.keys % 8 == 0, "mla_attention_expanded: the workspace holds keys in multiples of 8");
  static constexpr long long kValuesPerKey = S.latent + S.rope + S.heads * (S.nope + S.v);
  bf16 *c_kv, *k_rope, *k_nope, *v;

  explicit MlaExpanded(bf16* workspace)
      : c_kv(workspace),
        k_rope(c_kv + static_cast<long long>(S.keys) * S.latent),
        k_nope(k_rope + static_cast<long long>(S.keys) * S.rope),
        v(k_nope + static_cast<long long>(S.keys) * S.heads * S.nope) {}
};

namespace detail {

// Where the sequence `seq` of the group starts among the expanded rows: the sum of the context
// lengths before it. Every lane of the warp calls it.
__device__ __forceinline__ long long expanded_base(const int* context_len, int seq) {
  int sum = 0;
  for (int s = static_cast<int>(threadIdx.x % 32); s < seq; s += 32) sum += context_len[s];
  return __reduce_add_sync(0xffffffffu, sum);
}

// The expanded keys and values as a prefill attention source (blocks/prefill_kv.cuh): a key is
// k_nope of its head, then the k_rope all heads share.
template <int kHeads, int kNope, int kRope, int kV>
struct ExpandedKv {
  const bf16* k_nope;       // [keys, kHeads × kNope]
  const bf16* k_rope;       // [keys, kRope]
  const bf16* v;            // [keys, kHeads × kV]
  const int* context_len;   // the group's
  long long base = 0;       // the bound sequence's first row

  __device__ __forceinline__ void bind(int seq) { base = expanded_base(context_len, seq); }
  __device__ __forceinline__ const bf16* key(int head, int key, int col) const {
    const long long row = base + key;
    return col < kNope ? k_nope + (row * kHeads + head) * kNope + col : k_rope + row * kRope + (col - kNope);
  }
  __device__ __forceinline__ const bf16* value(int head, int key, int col) const {
    return v + ((base + key) * kHeads + head) * kV + col;
  }
  __device__ __forceinline__ void key_value(int head, int key, int col, const bf16*& k, const bf16*& v_) const {
    k = this->key(head, key, col);
    v_ = value(head, key, col);
  }
};

constexpr int kGatherKeys = 16, kGatherThreads = 256;

// Grid (ceil(longest context / kGatherKeys), sequences of the group).
template <int kLatent, int kRope, int kPageSize>
__global__ void __launch_bounds__(kGatherThreads)
    mla_expand_gather_kernel(const bf16* __restrict__ cache, const int* __restrict__ block_tables,
                             int max_pages_per_seq, const int* __restrict__ context_len, bf16* __restrict__ c_kv,
                             bf16* __restrict__ k_rope) {
  pdl_release_and_wait();
  constexpr int kWidth = kLatent + kRope;
  // 16-byte copies where no copy straddles c_kv and k_rope.
  constexpr int kVec = kLatent % 8 == 0 && kRope % 8 == 0 ? 8 : 1;
  constexpr int kPerRow = kWidth / kVec;
  const int seq = blockIdx.y;
  const int keys = context_len[seq];
  const int first = blockIdx.x * kGatherKeys;
  if (first >= keys) return;
  const long long base = expanded_base(context_len, seq);
  const int* pages = block_tables + static_cast<long long>(seq) * max_pages_per_seq;
  for (int i = threadIdx.x; i < kGatherKeys * kPerRow; i += kGatherThreads) {
    const int key = first + i / kPerRow, col = (i % kPerRow) * kVec;
    if (key >= keys) break;
    const bf16* src = cache + LatentLayout{kWidth}.row(static_cast<long long>(pages[key / kPageSize]) * kPageSize +
                                                       key % kPageSize) + col;
    const long long row = base + key;
    bf16* dst = col < kLatent ? c_kv + row * kLatent + col : k_rope + row * kRope + (col - kLatent);
    if constexpr (kVec == 8) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      *dst = *src;
    }
  }
}

}  // namespace detail

// Latent rows of the group's sequences (context_len[s] keys of sequence s through its block table
// row) into w.c_kv and w.k_rope; max_keys bounds every context_len[s].
template <shape::mla_attention_expanded S>
void mla_expand_gather(const bf16* cache, const int* block_tables, int max_pages_per_seq, const int* context_len,
                       int num_seqs, int max_keys, const MlaExpanded<S>& w, cudaStream_t stream) {
  if (num_seqs <= 0 || max_keys <= 0) return;
  const dim3 grid(detail::ceil_div(max_keys, detail::kGatherKeys), num_seqs);
  KILN_LAUNCH((detail::mla_expand_gather_kernel<S.latent, S.rope, S.page_size>), grid, detail::kGatherThreads, 0,
              stream, cache, block_tables, max_pages_per_seq, context_len, w.c_kv, w.k_rope);
}

// attn [T, heads × v]: tokens of the group's sequences (query_start, context_len: the group's)
// attend causally over their sequence's expanded rows, per head, q rows [T, heads × (nope + rope)].
template <shape::mla_attention_expanded S>
void mla_expanded_attention(const bf16* q, const MlaExpanded<S>& w, bf16* attn, const int* query_start,
                            const int* positions, const int* context_len, int num_seqs, int max_query_len,
                            cudaStream_t stream) {
  constexpr int kQk = S.nope + S.rope, kRow = S.heads * kQk;
  const detail::ExpandedKv<S.heads, S.nope, S.rope, S.v> kv{w.k_nope, w.k_rope, w.v, context_len};
  // 16-byte chunks of a key must not straddle k_nope and k_rope.
  constexpr bool kWholeChunks = S.nope % 8 == 0 && kRow % 8 == 0;
  detail::launch_prefill<S.heads, S.heads, kQk, S.v, kRow, kWholeChunks>(q, kv, attn, query_start, positions, num_seqs,
                                                                         max_query_len, S.scale, stream);
}

}  // namespace kiln
