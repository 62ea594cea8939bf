// Everything between the qkv projection and attention, in one launch: per token row of
// qkv = [q heads | k heads | v heads] (kRow wide),
//   when qk_norm, RMSNorm of each q and k head with q_norm / k_norm   (ref::head_rmsnorm)
//   RoPE of q and k, pairs (i, i + head_dim/2), table [pos][head_dim/2]  (ref::rope, not interleaved)
//   q written back in place, the roped k and v to the token's cache slot (ref::kv_write; the
//   layout of kv_layout.hpp; a negative slot writes nothing)
// with the norms' shared float operations (blocks/row_norm.cuh) and rope's. The k heads in qkv are
// left as they came (nothing reads them after).
#pragma once

#include "templates/blocks/row_norm.cuh"
#include "templates/common.cuh"
#include "templates/kv_layout.hpp"

namespace kiln {

namespace detail {

// kVec consecutive (cos, sin) pairs of the rope table from `from` (a multiple of kVec pairs past
// a row's start), two to a 16-byte load where kVec is even.
template <int kVec>
__device__ __forceinline__ void load_cos_sin(const float2* from, float2 (&cs)[kVec]) {
  if constexpr (kVec % 2 == 0) {
#pragma unroll
    for (int j = 0; j < kVec; j += 2) {
      const float4 two = *reinterpret_cast<const float4*>(from + j);
      cs[j] = make_float2(two.x, two.y);
      cs[j + 1] = make_float2(two.z, two.w);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) cs[j] = from[j];
  }
}

// Position pos's row of the RoPE table [pos][head_dim / 2] of (cos, sin) pairs.
template <int kHeadDim>
__device__ __forceinline__ const float2* rope_row(const float* table, int pos) {
  return reinterpret_cast<const float2*>(table) + static_cast<long long>(pos) * (kHeadDim / 2);
}

// One head vector `vector` (q heads, then k heads, then v heads) of token t, by the kLanes lanes of
// its group (lane: 0..kLanes-1; `head`: the group's kHeadDim staging values in shared memory). A q
// head goes to q_out (nullptr: nowhere), k and v to the token's cache slot. cos_sin: the token's
// row of the RoPE table (rope_row: kHeadDim / 2 (cos, sin) pairs), in global or shared memory.
// `valid` must be uniform over the group; every lane of the warp calls it (it shuffles and syncs
// the warp).
// attention_prep_kernel runs it for every vector of every token; the whole-step decode kernel
// (decode_step.cuh) runs it for the vectors of one KV head's group, so both compute the same bits.
template <int kHeads, int kKvHeads, int kHeadDim, int kRow, int kPageSize, bool kQkNorm, int kVec, int kLanes>
__device__ __forceinline__ void prep_head_vector(const bf16* qkv, bf16* q_out, const bf16* q_norm, const bf16* k_norm,
                                                 float eps, const float2* cos_sin, const int* slot_mapping,
                                                 bf16* cache, long long t, int vector,
                                                 bool valid, int lane, bf16* head) {
  constexpr int kSteps = ceil_div(kHeadDim, kLanes * kVec);
  constexpr int kHalf = kHeadDim / 2;
  using Bits = typename BitsOf<kVec>::type;
  const bool is_q = vector < kHeads, is_v = vector >= kHeads + kKvHeads;
  const bf16* src = qkv + t * kRow + vector * kHeadDim;

  // The destination in the cache of a k or v head (null: no slot, nothing to write).
  bf16* dst = nullptr;
  if (valid && !is_q) {
    const int slot = slot_mapping[t];
    if (slot >= 0) {
      const long long page = slot / kPageSize;
      const int in_page = slot % kPageSize;
      const int kv = is_v ? 1 : 0;
      const int h = vector - kHeads - kv * kKvHeads;
      dst = cache + KvLayout{kKvHeads, kHeadDim, kPageSize}.vec(page, kv, h, in_page);
    }
  }

  // Stage q and k (normalized first when kQkNorm); copy v.
  if constexpr (kQkNorm) {
    float x[kSteps][kVec];
    // Every lane shuffles, v groups included (they sum nothing and use nothing).
    const float sum_sq = head_sum_sq<kHeadDim, kVec, kLanes>(src, lane, valid && !is_v, x);
    if (valid && !is_v) {
      const float scale = rms_scale(sum_sq, kHeadDim, eps);
      const bf16* weight = is_q ? q_norm : k_norm;
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const int i = (s * kLanes + lane) * kVec;
        if (i < kHeadDim) {
          float w[kVec], y[kVec];
          load_bf16<kVec>(weight + i, w);
          rms_apply<kVec>(x[s], scale, w, y);
          store_bf16<kVec>(head + i, y);
        }
      }
    }
  } else if (valid && !is_v) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int i = (s * kLanes + lane) * kVec;
      if (i < kHeadDim) *reinterpret_cast<Bits*>(head + i) = load_bits<kVec>(src + i);
    }
  }
  if (is_v && dst != nullptr) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int i = (s * kLanes + lane) * kVec;
      if (i < kHeadDim) *reinterpret_cast<Bits*>(dst + i) = load_bits<kVec>(src + i);
    }
  }
  __syncwarp();

  // Rotate: each lane writes the chunks it loaded. Element e < kHalf is a·cos − b·sin of the pair
  // (a = e, b = e + kHalf), element e ≥ kHalf is b·cos + a·sin of the pair (a = e − kHalf, b = e):
  // rope's two expressions, one per element.
  bf16* out = is_q ? q_out : dst;
  if (!valid || is_v || out == nullptr) return;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int i = (s * kLanes + lane) * kVec;
    if (i < kHeadDim) {
      float y[kVec];
      if constexpr (kHalf % kVec == 0) {
        // The lane's chunk lies in one half: the other element of each of its pairs is the chunk
        // kHalf away, and its pairs' cos and sin are consecutive, so each comes in vector loads.
        // Loads per element kept the memory pipes 75% busy (ncu): Qwen3-8B's 2,048 tokens took
        // 28.0 µs so on an H200, 23.4 this way (bench/RESULTS.md 2026-11-29).
        const bool first = i < kHalf;
        const int pair = first ? i : i - kHalf;
        float own[kVec], other[kVec];
        load_bf16<kVec>(head + i, own);
        load_bf16<kVec>(head + (first ? i + kHalf : pair), other);
        float2 cs[kVec];
        load_cos_sin<kVec>(cos_sin + pair, cs);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          // rope's expressions as below: a = own, b = other in the first half; b = own, a = other after.
          y[j] = first ? own[j] * cs[j].x - other[j] * cs[j].y : own[j] * cs[j].x + other[j] * cs[j].y;
        }
      } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const int e = i + j;
          const bool first = e < kHalf;
          const int pair = first ? e : e - kHalf;
          const float a = __bfloat162float(head[pair]), b = __bfloat162float(head[pair + kHalf]);
          const float2 cs = cos_sin[pair];
          y[j] = first ? a * cs.x - b * cs.y : b * cs.x + a * cs.y;
        }
      }
      store_bf16<kVec>(out + i, y);
    }
  }
}

// A group of kLanes lanes per head vector (q, k or v) in the per-head norm geometry
// (HeadNormShape), so that the sums of squares come out in one fixed order: 32 / kLanes vectors per
// warp, 4 warps per block. A q or k head passes through shared memory between the norm and the
// rotation, which pairs values that different lanes loaded; the values staged there are the bf16
// values that a separate per-head norm would have stored (or the raw ones without the norm), so the
// rotation reads what rope would have read. q is rotated in place.
template <int kHeads, int kKvHeads, int kHeadDim, int kRow, int kPageSize, bool kQkNorm, int kVec, int kLanes>
__global__ void __launch_bounds__(128)
    attention_prep_kernel(bf16* __restrict__ qkv, const bf16* __restrict__ q_norm, const bf16* __restrict__ k_norm,
                          float eps, const int* __restrict__ positions, const float* __restrict__ table,
                          const int* __restrict__ slot_mapping, bf16* __restrict__ cache, long long items) {
  pdl_release_and_wait();
  constexpr int kVectors = kHeads + 2 * kKvHeads;
  __shared__ __align__(16) bf16 staged[128 / kLanes][kHeadDim];

  const long long item = (static_cast<long long>(blockIdx.x) * 128 + threadIdx.x) / kLanes;
  // Whole groups share `valid`, so the group's shuffles always see every member.
  const bool valid = item < items;
  const long long t = valid ? item / kVectors : 0;
  const int vector = valid ? static_cast<int>(item % kVectors) : 0;
  prep_head_vector<kHeads, kKvHeads, kHeadDim, kRow, kPageSize, kQkNorm, kVec, kLanes>(
      qkv, qkv + t * kRow + vector * kHeadDim, q_norm, k_norm, eps, rope_row<kHeadDim>(table, positions[t]),
      slot_mapping, cache, t, vector, valid, threadIdx.x % kLanes, staged[threadIdx.x / kLanes]);
}

}  // namespace detail

// q_norm, k_norm: [head_dim] each, read only when qk_norm (may be null otherwise). positions,
// slot_mapping: [tokens]; table: [max position][head_dim / 2] (cos, sin) fp32.
template <shape::attention_prep S>
void attention_prep(bf16* qkv, const bf16* q_norm, const bf16* k_norm, const int* positions, const float* table,
                    const int* slot_mapping, bf16* cache, int tokens, cudaStream_t stream) {
  constexpr int kHeads = S.heads, kKvHeads = S.kv_heads, kHeadDim = S.head_dim, kRow = S.row, kPageSize = S.page_size;
  static_assert(kHeads > 0 && kKvHeads > 0 && kHeadDim > 0 && kPageSize > 0, "attention_prep: sizes must be positive");
  static_assert(kHeadDim % 2 == 0, "attention_prep: RoPE pairs need an even head dim");
  static_assert((kHeads + 2 * kKvHeads) * kHeadDim <= kRow, "attention_prep: q, k and v heads must fit in a row");
  if (tokens <= 0) return;
  // The per-head norm geometry (its vector width also suits the k and v copies: it divides the
  // row and the head dim).
  using Shape = detail::HeadNormShape<kHeadDim, kRow>;
  const long long items = static_cast<long long>(tokens) * (kHeads + 2 * kKvHeads);
  const int blocks = static_cast<int>(detail::ceil_div_ll(items * Shape::kLanes, 128));
  auto kernel =
      detail::attention_prep_kernel<kHeads, kKvHeads, kHeadDim, kRow, kPageSize, S.qk_norm, Shape::kVec, Shape::kLanes>;
  KILN_LAUNCH(kernel, blocks, 128, 0, stream, qkv, q_norm, k_norm, S.eps, positions, table, slot_mapping, cache, items);
}

}  // namespace kiln
