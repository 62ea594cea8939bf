// DeepSeekMoE routed experts' down projections, weighted and added into the residual
// (ref::moe_down). Reuses the buckets moe_gate_up left in scratch. Two entry points:
//   moe_down           (decode) T <= 64: a block owns 16 rows of the output and goes over every
//                      used expert, summing weight · (W_e · act) per token in shared memory in a
//                      fixed order: each expert is read from DRAM once and the result is
//                      deterministic. Larger T: the grouped GEMM, adding into x with fp32 atomics
//                      (order not fixed; only a decode batch above 64 takes it).
//   moe_down_prefill   the grouped GEMM at every T (on Hopper: 128 × 256 tiles on wgmma,
//                      tile_gemm_wgmma.cuh), each pair's output stored in `pairs` (bf16, as HF
//                      rounds each expert's output; half the bytes of fp32), then every token's
//                      pairs weighted and added into x in slot order: the same bits for a token
//                      whatever else is in its step (a prompt alone, chunked or batched).
// Shapes whose rows cannot be read 16 bytes at a time stream at every T, in 64-token windows, in
// both (deterministic, and a token's sum is the same in any window).
#pragma once

#include "templates/blocks/moe_buckets.cuh"
#include "templates/blocks/stream_rows.cuh"
#include "templates/blocks/tile_gemm.cuh"
#include "templates/blocks/tile_gemm_wgmma.cuh"
#include "templates/common.cuh"

namespace kiln {

namespace detail {

template <int kHidden, int kInter, int kWindowTiles>
struct DownStreamShape {
  static constexpr int kSteps = ceil_div(kInter, 32);
  static constexpr int kWK = max_int(1, min_int(16, kSteps / 2));  // every warp on the block's 16 rows
  static constexpr int kThreads = kWK * 32;
  static constexpr int kWindow = 8 * kWindowTiles;                 // tokens per launch
  static constexpr int kTT = min_int(kWindowTiles, 2);             // token tiles per pass over an expert's pairs
  static constexpr int kSmemBytes = kWK * kWindow * 16 * 4;        // per-warp sums [kWK][kWindow][16]
};

// First index in sorted[0, n) whose value is >= key.
__device__ __forceinline__ int lower_bound_int(const int* sorted, int n, int key) {
  int lo = 0;
  while (n > 0) {
    const int half = n / 2;
    if (sorted[lo + half] < key) {
      lo += half + 1;
      n -= half + 1;
    } else {
      n = half;
    }
  }
  return lo;
}

// x[t, rows] += Σ_j weights[t, j] · weight[ids[t, j]][rows] · act[t, j] for tokens
// [t_begin, t_begin + t_count) (t_count <= kWindow) and the block's 16 rows. Every warp goes over
// every used expert (ascending id) for its own column steps and adds weight · partial into its own
// shared sums; the warps' sums are added in warp order at the end: deterministic.
template <int kExperts, int kTopK, int kHidden, int kInter, int kWindowTiles>
__global__ void __launch_bounds__(DownStreamShape<kHidden, kInter, kWindowTiles>::kThreads)
    moe_down_stream_kernel(const bf16* __restrict__ act, const bf16* __restrict__ weight,
                           const float* __restrict__ weights, const int* __restrict__ scratch, float* __restrict__ x,
                           int t_begin, int t_count) {
  pdl_release_and_wait();
  using Shape = DownStreamShape<kHidden, kInter, kWindowTiles>;
  constexpr int WK = Shape::kWK, kWindow = Shape::kWindow, kTT = Shape::kTT;
  extern __shared__ float4 smem_f4[];
  float* sums = reinterpret_cast<float*>(smem_f4);  // [WK][kWindow][16]
  for (int i = threadIdx.x; i < WK * kWindow * 16; i += Shape::kThreads) sums[i] = 0.0f;
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int row0 = blockIdx.x * 16 + g, row1 = row0 + 8;
  const int pair_lo = t_begin * kTopK, pair_hi = (t_begin + t_count) * kTopK;
  float* my_sums = sums + warp * kWindow * 16;
  const int* sorted = scratch + kExperts + 1;

  for (int e = 0; e < kExperts; ++e) {
    const int bucket = scratch[e], bucket_size = scratch[e + 1] - bucket;
    if (bucket_size == 0) continue;
    // The window's pairs are a contiguous run of the (ascending) bucket.
    const int first = bucket + lower_bound_int(sorted + bucket, bucket_size, pair_lo);
    const int n = bucket + lower_bound_int(sorted + bucket, bucket_size, pair_hi) - first;
    if (n == 0) continue;
    const bf16* w = weight + static_cast<long long>(e) * kHidden * kInter;
    const bf16* w0 = w + static_cast<long long>(min(row0, kHidden - 1)) * kInter;
    const bf16* w1 = w + static_cast<long long>(min(row1, kHidden - 1)) * kInter;
    for (int base = 0; base < n; base += 8 * kTT) {
      const bf16* xr[kTT];
      bool x_ok[kTT];
#pragma unroll
      for (int j = 0; j < kTT; ++j) {
        const int i = base + j * 8 + g;
        x_ok[j] = i < n;
        xr[j] = act + static_cast<long long>(sorted[first + min(i, n - 1)]) * kInter;
      }
      float acc[kTT][4];
#pragma unroll
      for (int j = 0; j < kTT; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;
      Rows16<kInter, kTT, WK>::dot(w0, w1, row0 < kHidden, row1 < kHidden, xr, x_ok, warp, acc);
      // Lanes of one g and different q may hold the same token (repeated ids): one q at a time.
      for (int qq = 0; qq < 4; ++qq) {
        if (q == qq) {
#pragma unroll
          for (int j = 0; j < kTT; ++j) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              const int i = base + j * 8 + 2 * q + (c & 1);
              if (i < n) {
                const int p = sorted[first + i];
                my_sums[(p / kTopK - t_begin) * 16 + g + (c / 2) * 8] += weights[p] * acc[j][c];
              }
            }
          }
        }
        __syncwarp();
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < t_count * 16; i += Shape::kThreads) {
    const int t = i / 16, r = i % 16, row = blockIdx.x * 16 + r;
    if (row < kHidden) {
      float v = 0.0f;
#pragma unroll
      for (int k = 0; k < WK; ++k) v += sums[(k * kWindow + t) * 16 + r];
      x[static_cast<long long>(t_begin + t) * kHidden + row] += v;
    }
  }
}

template <int kExperts, int kTopK, int kHidden, int kInter, int kWindowTiles>
inline void launch_moe_down_stream(const bf16* act, const bf16* weight, const float* weights, const int* scratch,
                                   float* x, int t_begin, int t_count, cudaStream_t stream) {
  using Shape = DownStreamShape<kHidden, kInter, kWindowTiles>;
  constexpr auto kernel = moe_down_stream_kernel<kExperts, kTopK, kHidden, kInter, kWindowTiles>;
  allow_dynamic_smem_once<kernel, Shape::kSmemBytes>();
  KILN_LAUNCH(kernel, ceil_div(kHidden, 16), Shape::kThreads, Shape::kSmemBytes, stream, act, weight, weights, scratch,
              x, t_begin, t_count);
}


// x[p / kTopK] += weights[p] · (weight[e] · act[p]) for the pairs p of expert e (fp32 atomics).
template <int kExperts, int kTopK, int kHidden, int kInter>
struct MoeDownGemm : ExpertPairTiles<kExperts> {
  using ExpertPairTiles<kExperts>::pair;
  static constexpr int kN = kHidden, kK = kInter;
  static constexpr bool kBKMajor = false;
  struct Args {
    const bf16* act;
    const bf16* weight;
    const float* weights;
    const int* scratch;
    float* x;
  };
  __device__ static const bf16* a_row(const Args& a, int group, int m) {
    return a.act + static_cast<long long>(pair(a, group, m)) * kInter;
  }
  __device__ static const bf16* b_matrix(const Args& a, int group) {
    return a.weight + static_cast<long long>(group) * kN * kK;
  }
  struct Row {
    float* out;  // the pair's token's row of x
    float weight;
  };
  __device__ static Row row(const Args& a, int group, int m) {
    const int p = pair(a, group, m);
    return {a.x + static_cast<long long>(p / kTopK) * kHidden, a.weights[p]};
  }
  __device__ static void store(const Args&, const Row& row, int n, float v0, float v1, bool two) {
    atomicAdd(row.out + n, row.weight * v0);
    if (two) atomicAdd(row.out + n + 1, row.weight * v1);
  }
};

// pairs[p, :] = weight[e] · act[p] for the pairs p of expert e (bf16, plain stores; weighted when summed).
template <int kExperts, int kTopK, int kHidden, int kInter>
struct MoeDownPairsGemm : MoeDownGemm<kExperts, kTopK, kHidden, kInter> {
  using Base = MoeDownGemm<kExperts, kTopK, kHidden, kInter>;
  struct Args : Base::Args {
    bf16* pairs;
  };
  using Row = bf16*;
  __device__ static Row row(const Args& a, int group, int m) {
    return a.pairs + static_cast<long long>(Base::pair(a, group, m)) * kHidden;
  }
  __device__ static void store(const Args&, Row row, int n, float v0, float v1, bool two) {
    store_bf16_columns<kHidden>(row, n, v0, v1, two);
  }
};

// x[t, n] += Σ_j weights[t · kTopK + j] · pairs[t · kTopK + j, n] over the slots j whose expert is on
// this rank (ids >= 0), j ascending, in fp32. Four columns per thread.
template <int kTopK, int kHidden>
__global__ void __launch_bounds__(kElementwiseThreads)
    moe_down_sum_pairs_kernel(const bf16* __restrict__ pairs, const int* __restrict__ ids,
                              const float* __restrict__ weights, float* __restrict__ x, long long quads) {
  pdl_release_and_wait();
  static_assert(kHidden % 4 == 0, "moe_down_sum_pairs: rows of whole 8-byte quads");
  constexpr int kQuads = kHidden / 4;
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= quads) return;
  const long long t = i / kQuads;
  const int c = static_cast<int>(i % kQuads) * 4;
  float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int j = 0; j < kTopK; ++j) {
    const long long p = t * kTopK + j;
    if (ids[p] < 0) continue;  // another rank's expert: not computed here
    const float w = weights[p];
    float v[4];
    load_bf16<4>(pairs + p * kHidden + c, v);
    sum.x += w * v[0];
    sum.y += w * v[1];
    sum.z += w * v[2];
    sum.w += w * v[3];
  }
  float4* dst = reinterpret_cast<float4*>(x + t * kHidden + c);
  float4 r = *dst;
  r.x += sum.x;
  r.y += sum.y;
  r.z += sum.z;
  r.w += sum.w;
  *dst = r;
}

// Windows of at most one streaming pass of tokens, each reading the experts its tokens chose.
template <int kExperts, int kTopK, int kHidden, int kInter>
inline void moe_down_streaming(const bf16* act, const bf16* weight, const float* weights, const int* scratch, float* x,
                               int tokens, cudaStream_t stream) {
  for (int t0 = 0; t0 < tokens; t0 += kStreamPassTokens) {
    const int n = min_int(kStreamPassTokens, tokens - t0);
    with_token_tiles(n, [&](auto tiles) {
      launch_moe_down_stream<kExperts, kTopK, kHidden, kInter, decltype(tiles)::value>(act, weight, weights, scratch, x,
                                                                                        t0, n, stream);
    });
  }
}

}  // namespace detail

// act [T, top_k, inter], weight [experts, hidden, inter]: x[t] += Σ_j weights[t, j] ·
// weight[ids[t, j]] · act[t, j]. Needs the buckets moe_gate_up left in scratch for these ids.
template <shape::moe_down S>
void moe_down(const bf16* act, const bf16* weight, const int* ids, const float* weights, const int* scratch, float* x,
              int tokens, cudaStream_t stream) {
  constexpr int kExperts = S.experts, kTopK = S.top_k, kHidden = S.hidden, kInter = S.inter;
  static_assert(kExperts > 0 && kTopK > 0 && kHidden > 0 && kInter > 0, "moe_down: sizes must be positive");
  (void)ids;  // the buckets in scratch carry them
  if (tokens <= 0) return;
  if constexpr (kInter % 8 == 0) {
    if (tokens > detail::kMoeStreamTokens) {
      using P = detail::MoeDownGemm<kExperts, kTopK, kHidden, kInter>;
      const dim3 grid(detail::ceil_div(kHidden, 128), detail::expert_tile_bound<kExperts, kTopK>(tokens));
      detail::launch_tile_gemm<P, 128>(typename P::Args{act, weight, weights, scratch, x}, grid, stream);
      return;
    }
  }
  detail::moe_down_streaming<kExperts, kTopK, kHidden, kInter>(act, weight, weights, scratch, x, tokens, stream);
}

// Prefill steps: as moe_down, the same bits for a token at any T (see the top). pairs: [T, top_k,
// hidden] bf16, written before it is read (moe_down_pair_values_per_token).
template <shape::moe_down S>
void moe_down_prefill(const bf16* act, const bf16* weight, const int* ids, const float* weights, const int* scratch,
                      bf16* pairs, float* x, int tokens, cudaStream_t stream) {
  constexpr int kExperts = S.experts, kTopK = S.top_k, kHidden = S.hidden, kInter = S.inter;
  static_assert(kExperts > 0 && kTopK > 0 && kHidden > 0 && kInter > 0, "moe_down: sizes must be positive");
  if (tokens <= 0) return;
  if constexpr (kInter % 8 == 0 && kHidden % 8 == 0) {
    using P = detail::MoeDownPairsGemm<kExperts, kTopK, kHidden, kInter>;
    const typename P::Args args{{act, weight, weights, scratch, x}, pairs};
    detail::launch_expert_gemm<P, kExperts, kTopK>(args, tokens, stream);
    const long long quads = static_cast<long long>(tokens) * (kHidden / 4);
    KILN_LAUNCH((detail::moe_down_sum_pairs_kernel<kTopK, kHidden>),
                static_cast<int>(detail::ceil_div_ll(quads, detail::kElementwiseThreads)), detail::kElementwiseThreads, 0,
                stream, pairs, ids, weights, x, quads);
  } else {
    (void)pairs;
    (void)ids;
    detail::moe_down_streaming<kExperts, kTopK, kHidden, kInter>(act, weight, weights, scratch, x, tokens, stream);
  }
}

// bf16 values per token of moe_down_prefill's `pairs` (the generator's kMoeTokenDownWidth).
template <shape::moe_down S>
constexpr int moe_down_pair_values_per_token() {
  return S.top_k * S.hidden;
}

}  // namespace kiln
