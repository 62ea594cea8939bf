// MLA's absorbed value up-projection (ref::mla_v_up): out[t, h] = W_UV[h] · o_lat[t, h]. At decode
// (T <= 64) W_UV streams like a GEMV (blocks/stream_rows.cuh), which needs heads of whole 16-row
// tiles; prefill (mla_v_up_prefill, any T) takes the per-head tile GEMM; shapes the vector paths
// cannot address (the tiny test models) a CUDA-core kernel.
#pragma once

#include "templates/blocks/per_head_gemm.cuh"
#include "templates/blocks/stream_rows.cuh"
#include "templates/blocks/tile_gemm.cuh"
#include "templates/common.cuh"

namespace kiln {

namespace detail {

// One thread per output value.
template <int kHeads, int kLatent, int kV>
__global__ void __launch_bounds__(kElementwiseThreads) mla_v_up_simple_kernel(const bf16* __restrict__ o_lat,
                                                              const bf16* __restrict__ w_uv, bf16* __restrict__ out,
                                                              long long items) {
  pdl_release_and_wait();
  const long long item = static_cast<long long>(blockIdx.x) * kElementwiseThreads + threadIdx.x;
  if (item >= items) return;
  const long long th = item / kV;  // token · kHeads + head
  const int e = static_cast<int>(item % kV), h = static_cast<int>(th % kHeads);
  const bf16* o = o_lat + th * kLatent;
  const bf16* w = w_uv + (static_cast<long long>(h) * kV + e) * kLatent;
  float v = 0.0f;
  for (int c = 0; c < kLatent; ++c) v += __bfloat162float(w[c]) * __bfloat162float(o[c]);
  out[item] = __float2bfloat16_rn(v);
}

// Per head h: out[t, h, :] = o_lat[t, h, :] · W_UV[h]ᵀ (W_UV[h] is [kV][kLatent]: nn.Linear rows).
template <int kHeads, int kLatent, int kV>
struct MlaVUpGemm : PerHeadTokenTiles {
  static constexpr int kN = kV, kK = kLatent;
  static constexpr bool kBKMajor = false;
  struct Args {
    const bf16* o_lat;
    const bf16* w_uv;
    bf16* out;
    int tokens;
  };
  __device__ static const bf16* a_row(const Args& a, int group, int m) {
    return a.o_lat + (static_cast<long long>(m) * kHeads + group) * kLatent;
  }
  __device__ static const bf16* b_matrix(const Args& a, int group) {
    return a.w_uv + static_cast<long long>(group) * kV * kLatent;
  }
  using Row = bf16*;
  __device__ static Row row(const Args& a, int group, int m) {
    return a.out + (static_cast<long long>(m) * kHeads + group) * kV;
  }
  __device__ static void store(const Args&, Row row, int n, float v0, float v1, bool two) {
    store_bf16_pair(row + n, v0, v1, two);
  }
  __device__ static void prologue(const Args&, int, int, int) {}
};

// The same pass as blocks/moe_stream.cuh's moe_stream_kernel, written out: one shared device
// helper for both passes measured 24% slower gate_up at T = 1 on H200 (28 -> 35 us).
// Decode v_up as a GEMV over the kHeads · kV rows of W_UV (one read per call): a 16-row tile lies
// inside one head (kV % 16 == 0), whose o_lat rows are the tokens' inputs. One pass of <= 8·kTT tokens.
template <int kHeads, int kLatent, int kV, int kTT>
__global__ void __launch_bounds__(ExpertStreamShape<kHeads * kV, kLatent, kTT>::kThreads)
    mla_v_up_stream_kernel(const bf16* __restrict__ o_lat, const bf16* __restrict__ w_uv, bf16* __restrict__ out,
                           int tokens) {
  pdl_release_and_wait();
  constexpr int kRows = kHeads * kV;
  using Shape = ExpertStreamShape<kRows, kLatent, kTT>;
  constexpr int WK = Shape::kWK, WN = Shape::kWN;
  static_assert(kV % 16 == 0, "mla_v_up_stream: a row tile must lie inside one head");
  __shared__ float partial[WN * WK][128];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wn = warp / WK, wk = warp % WK, g = lane / 4;
  const int tile = blockIdx.x * WN + wn;
  const int row0 = tile * 16 + g, row1 = row0 + 8;
  const int head = min(tile * 16, kRows - 1) / kV;
  const bf16* w0 = w_uv + static_cast<long long>(min(row0, kRows - 1)) * kLatent;
  const bf16* w1 = w_uv + static_cast<long long>(min(row1, kRows - 1)) * kLatent;
  const bf16* x[kTT];
  bool x_ok[kTT];
#pragma unroll
  for (int j = 0; j < kTT; ++j) {
    const int t = j * 8 + g;
    x_ok[j] = t < tokens;
    x[j] = o_lat + (static_cast<long long>(min(t, tokens - 1)) * kHeads + head) * kLatent;
  }
  float acc[kTT][4];
#pragma unroll
  for (int j = 0; j < kTT; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;
  Rows16<kLatent, kTT, WK>::dot(w0, w1, row0 < kRows, row1 < kRows, x, x_ok, wk, acc);

#pragma unroll
  for (int j = 0; j < kTT; ++j) {
    sum_column_splits<WN, WK, Shape::kThreads>(partial, acc[j], [&](int block_row, int token, float v) {
      const int row = blockIdx.x * WN * 16 + block_row;
      const int t = j * 8 + token;
      if (row < kRows && t < tokens) out[static_cast<long long>(t) * kRows + row] = __float2bfloat16_rn(v);
    });
  }
}

template <int kHeads, int kLatent, int kV, int kTT>
inline void launch_mla_v_up_stream(const bf16* o_lat, const bf16* w_uv, bf16* out, int tokens, cudaStream_t stream) {
  using Shape = ExpertStreamShape<kHeads * kV, kLatent, kTT>;
  auto kernel = mla_v_up_stream_kernel<kHeads, kLatent, kV, kTT>;
  KILN_LAUNCH(kernel, Shape::kRowBlocks, Shape::kThreads, 0, stream, o_lat, w_uv, out, tokens);
}

}  // namespace detail

namespace detail {

// The prefill path at any T: the per-head tile GEMM, or CUDA cores where rows are not 16-byte aligned.
template <int kHeads, int kLatent, int kV>
void mla_v_up_rows(const bf16* o_lat, const bf16* w_uv, bf16* out, int tokens, cudaStream_t stream) {
  if constexpr (kLatent % 8 == 0) {
    using P = MlaVUpGemm<kHeads, kLatent, kV>;
    const dim3 grid(ceil_div(kV, 64), ceil_div(tokens, 64), kHeads);
    launch_tile_gemm<P, 64>(typename P::Args{o_lat, w_uv, out, tokens}, grid, stream);
  } else {
    const long long items = static_cast<long long>(tokens) * kHeads * kV;
    auto kernel = mla_v_up_simple_kernel<kHeads, kLatent, kV>;
    KILN_LAUNCH(kernel, static_cast<int>(ceil_div_ll(items, kElementwiseThreads)), kElementwiseThreads, 0, stream,
                o_lat, w_uv, out, items);
  }
}

}  // namespace detail

// o_lat [T, heads, latent], w_uv [heads, v, latent] -> out [T, heads · v]. Decode steps (T <= 64)
// stream W_UV where heads are whole 16-row tiles.
template <shape::mla_v_up S>
void mla_v_up(const bf16* o_lat, const bf16* w_uv, bf16* out, int tokens, cudaStream_t stream) {
  constexpr int kHeads = S.heads, kLatent = S.latent, kV = S.v;
  static_assert(kHeads > 0 && kLatent > 0 && kV > 0, "mla_v_up: sizes must be positive");
  if (tokens <= 0) return;
  if constexpr (kV % 16 == 0) {
    if (tokens <= detail::kStreamPassTokens) {
      detail::with_token_tiles(tokens, [&](auto tiles) {
        detail::launch_mla_v_up_stream<kHeads, kLatent, kV, decltype(tiles)::value>(o_lat, w_uv, out, tokens, stream);
      });
      return;
    }
  }
  detail::mla_v_up_rows<kHeads, kLatent, kV>(o_lat, w_uv, out, tokens, stream);
}

// Prefill steps: one path at every T, so that a token's output has the same bits whatever else is
// in its step (a prompt alone, chunked or batched with others).
template <shape::mla_v_up S>
void mla_v_up_prefill(const bf16* o_lat, const bf16* w_uv, bf16* out, int tokens, cudaStream_t stream) {
  static_assert(S.heads > 0 && S.latent > 0 && S.v > 0, "mla_v_up: sizes must be positive");
  if (tokens <= 0) return;
  detail::mla_v_up_rows<S.heads, S.latent, S.v>(o_lat, w_uv, out, tokens, stream);
}

}  // namespace kiln
