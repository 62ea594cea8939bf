// Multi-head latent attention (DeepSeek-V2), the pieces around the attention itself, on the
// absorbed formulation (ref::mla_kv_write, ref::mla_q_absorb, ref::mla_v_up):
//   mla_kv_write  latent cache row of each token = c_kv | k_rope
//   mla_q_absorb  q_mla[t, h] = W_UK[h]ᵀ · q_nope[t, h] | q_rope[t, h]
//   mla_v_up      out[t, h] = W_UV[h] · o_lat[t, h]
// Per head these are small matmuls sharing one weight matrix across the tokens. The tensor-core
// tile GEMM (moe.cuh) serves every token count for q_absorb and prefill for v_up: at decode
// (T <= 64) its 64-token tile holds the whole batch, so each head's W_UK tile is read once per
// call. v_up at decode streams W_UV like a GEMV (moe.cuh Rows16), which needs heads of whole
// 16-row tiles. Shapes that the vector paths cannot address (rows not 16-byte aligned: the tiny
// test models) use plain CUDA-core kernels.
#pragma once

#include "templates/common.cuh"
#include "templates/moe.cuh"

namespace kiln {

namespace detail {

// ---- kv write: one thread per vector of a cache row ----
template <int kWidth, int kVec>
__global__ void __launch_bounds__(256) mla_kv_write_kernel(const bf16* __restrict__ kv_a,
                                                           const int* __restrict__ slot_mapping,
                                                           bf16* __restrict__ cache, long long vectors) {
  constexpr int kPerRow = kWidth / kVec;
  const long long item = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x;
  if (item >= vectors) return;
  const long long t = item / kPerRow;
  const int i = static_cast<int>(item % kPerRow) * kVec;
  const int slot = slot_mapping[t];
  if (slot < 0) return;  // a padding token: no cache row
  using Bits = typename BitsOf<kVec>::type;
  *reinterpret_cast<Bits*>(cache + static_cast<long long>(slot) * kWidth + i) =
      *reinterpret_cast<const Bits*>(kv_a + t * kWidth + i);
}

// ---- CUDA-core fallbacks for shapes the vector paths cannot address ----

// One thread per q_mla value: latent columns sum over the nope dims, rope columns are copied.
template <int kHeads, int kNope, int kRope, int kLatent>
__global__ void __launch_bounds__(256) mla_q_absorb_simple_kernel(const bf16* __restrict__ q,
                                                                  const bf16* __restrict__ w_uk,
                                                                  bf16* __restrict__ q_mla, long long items) {
  constexpr int kOut = kLatent + kRope, kIn = kNope + kRope;
  const long long item = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x;
  if (item >= items) return;
  const long long th = item / kOut;  // token · kHeads + head
  const int c = static_cast<int>(item % kOut), h = static_cast<int>(th % kHeads);
  const bf16* qh = q + th * kIn;
  float v;
  if (c < kLatent) {
    v = 0.0f;
    const bf16* w = w_uk + static_cast<long long>(h) * kNope * kLatent + c;
    for (int d = 0; d < kNope; ++d) v += __bfloat162float(qh[d]) * __bfloat162float(w[d * kLatent]);
  } else {
    v = __bfloat162float(qh[kNope + c - kLatent]);
  }
  q_mla[item] = __float2bfloat16_rn(v);
}

// One thread per output value.
template <int kHeads, int kLatent, int kV>
__global__ void __launch_bounds__(256) mla_v_up_simple_kernel(const bf16* __restrict__ o_lat,
                                                              const bf16* __restrict__ w_uv, bf16* __restrict__ out,
                                                              long long items) {
  const long long item = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x;
  if (item >= items) return;
  const long long th = item / kV;  // token · kHeads + head
  const int e = static_cast<int>(item % kV), h = static_cast<int>(th % kHeads);
  const bf16* o = o_lat + th * kLatent;
  const bf16* w = w_uv + (static_cast<long long>(h) * kV + e) * kLatent;
  float v = 0.0f;
  for (int c = 0; c < kLatent; ++c) v += __bfloat162float(w[c]) * __bfloat162float(o[c]);
  out[item] = __float2bfloat16_rn(v);
}

// ---- tensor-core paths ----

// The grid of both per-head TileGemm problems: blockIdx.z is the head (the GEMM group), blockIdx.y
// a tile of 64 tokens.
struct PerHeadTokenTiles {
  template <typename Args>
  __device__ static bool locate(const Args& a, int& group, int& m0, int& rows) {
    group = blockIdx.z;
    m0 = blockIdx.y * 64;
    rows = min(64, a.tokens - m0);
    return rows > 0;
  }
};

// Per head h: q_mla[t, h, :kLatent] = q[t, h, :kNope] · W_UK[h] ([kNope][kLatent]: K-major B);
// the blocks of the first column tile also copy the rope part.
template <int kHeads, int kNope, int kRope, int kLatent>
struct MlaQAbsorbGemm : PerHeadTokenTiles {
  static constexpr int kN = kLatent, kK = kNope;
  static constexpr bool kBKMajor = true;
  static constexpr int kIn = kNope + kRope, kOut = kLatent + kRope;
  struct Args {
    const bf16* q;
    const bf16* w_uk;
    bf16* q_mla;
    int tokens;
  };
  __device__ static const bf16* a_row(const Args& a, int group, int m) {
    return a.q + (static_cast<long long>(m) * kHeads + group) * kIn;
  }
  __device__ static const bf16* b_matrix(const Args& a, int group) {
    return a.w_uk + static_cast<long long>(group) * kNope * kLatent;
  }
  __device__ static void store(const Args& a, int group, int m, int n, float v0, float v1, bool two) {
    store_bf16_pair(a.q_mla + (static_cast<long long>(m) * kHeads + group) * kOut + n, v0, v1, two);
  }
  __device__ static void prologue(const Args& a, int group, int m0, int rows) {
    if constexpr (kRope > 0) {
      // Vectors that divide the rope start and length in both rows and both row strides.
      constexpr int kVec = vec_width(gcd_int(gcd_int(kNope, kRope), kLatent), 2);
      using Bits = typename BitsOf<kVec>::type;
      constexpr int kPerRow = kRope / kVec;
      for (int i = threadIdx.x; i < rows * kPerRow; i += blockDim.x) {
        const long long th = static_cast<long long>(m0 + i / kPerRow) * kHeads + group;
        const int d = (i % kPerRow) * kVec;
        *reinterpret_cast<Bits*>(a.q_mla + th * kOut + kLatent + d) =
            *reinterpret_cast<const Bits*>(a.q + th * kIn + kNope + d);
      }
    }
  }
};

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
  __device__ static void store(const Args& a, int group, int m, int n, float v0, float v1, bool two) {
    store_bf16_pair(a.out + (static_cast<long long>(m) * kHeads + group) * kV + n, v0, v1, two);
  }
  __device__ static void prologue(const Args&, int, int, int) {}
};

// The same pass as moe.cuh's moe_gate_up_stream_kernel, written out: one shared device helper for
// both (a store callback per row) measured 24% slower gate_up at T = 1 on H200 (28 -> 35 us).
// Decode v_up as a GEMV over the kHeads · kV rows of W_UV (one read per call): a 16-row tile lies
// inside one head (kV % 16 == 0), whose o_lat rows are the tokens' inputs. One pass of <= 8·kTT tokens.
template <int kHeads, int kLatent, int kV, int kTT>
__global__ void __launch_bounds__(ExpertStreamShape<kHeads * kV, kLatent, kTT>::kThreads)
    mla_v_up_stream_kernel(const bf16* __restrict__ o_lat, const bf16* __restrict__ w_uv, bf16* __restrict__ out,
                           int tokens) {
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
#pragma unroll
    for (int c = 0; c < 4; ++c) partial[warp][lane * 4 + c] = acc[j][c];
    __syncthreads();
    for (int i = threadIdx.x; i < WN * 128; i += Shape::kThreads) {
      const int tn = i / 128, token = (i / 16) % 8, r = i % 16;
      const int src_lane = (r % 8) * 4 + token / 2, src_c = (r / 8) * 2 + token % 2;
      float v = 0.0f;
#pragma unroll
      for (int k = 0; k < WK; ++k) v += partial[tn * WK + k][src_lane * 4 + src_c];
      const int row = (blockIdx.x * WN + tn) * 16 + r;
      const int t = j * 8 + token;
      if (row < kRows && t < tokens) out[static_cast<long long>(t) * kRows + row] = __float2bfloat16_rn(v);
    }
    __syncthreads();
  }
}

template <int kHeads, int kLatent, int kV, int kTT>
inline void launch_mla_v_up_stream(const bf16* o_lat, const bf16* w_uv, bf16* out, int tokens, cudaStream_t stream) {
  using Shape = ExpertStreamShape<kHeads * kV, kLatent, kTT>;
  auto kernel = mla_v_up_stream_kernel<kHeads, kLatent, kV, kTT>;
  KILN_LAUNCH(kernel, Shape::kRowBlocks, Shape::kThreads, 0, stream, o_lat, w_uv, out, tokens);
}

}  // namespace detail

// kv_a [T, kLatent + kRope] -> cache row slot_mapping[t] of [num_pages][kPageSize][kLatent + kRope]
// (slot s = page · kPageSize + offset is row s). Negative slots are skipped.
template <int kLatent, int kRope, int kPageSize>
void mla_kv_write(const bf16* kv_a, const int* slot_mapping, bf16* cache, int tokens, cudaStream_t stream) {
  static_assert(kLatent > 0 && kRope >= 0 && kPageSize > 0, "mla_kv_write: sizes must be positive");
  if (tokens <= 0) return;
  constexpr int kWidth = kLatent + kRope;
  constexpr int kVec = detail::vec_width(kWidth, 2);
  const long long vectors = static_cast<long long>(tokens) * (kWidth / kVec);
  auto kernel = detail::mla_kv_write_kernel<kWidth, kVec>;
  KILN_LAUNCH(kernel, static_cast<int>(detail::ceil_div_ll(vectors, 256)), 256, 0, stream, kv_a, slot_mapping, cache,
              vectors);
}

// q [T, kHeads, kNope + kRope], w_uk [kHeads, kNope, kLatent] -> q_mla [T, kHeads, kLatent + kRope].
template <int kHeads, int kNope, int kRope, int kLatent>
void mla_q_absorb(const bf16* q, const bf16* w_uk, bf16* q_mla, int tokens, cudaStream_t stream) {
  static_assert(kHeads > 0 && kNope > 0 && kRope >= 0 && kLatent > 0, "mla_q_absorb: sizes must be positive");
  if (tokens <= 0) return;
  if constexpr (kNope % 8 == 0 && kRope % 8 == 0 && kLatent % 8 == 0) {
    using P = detail::MlaQAbsorbGemm<kHeads, kNope, kRope, kLatent>;
    const dim3 grid(detail::ceil_div(kLatent, 64), detail::ceil_div(tokens, 64), kHeads);
    detail::launch_tile_gemm<P, 64>(typename P::Args{q, w_uk, q_mla, tokens}, grid, stream);
  } else {
    const long long items = static_cast<long long>(tokens) * kHeads * (kLatent + kRope);
    auto kernel = detail::mla_q_absorb_simple_kernel<kHeads, kNope, kRope, kLatent>;
    KILN_LAUNCH(kernel, static_cast<int>(detail::ceil_div_ll(items, 256)), 256, 0, stream, q, w_uk, q_mla, items);
  }
}

// o_lat [T, kHeads, kLatent], w_uv [kHeads, kV, kLatent] -> out [T, kHeads · kV].
template <int kHeads, int kLatent, int kV>
void mla_v_up(const bf16* o_lat, const bf16* w_uv, bf16* out, int tokens, cudaStream_t stream) {
  static_assert(kHeads > 0 && kLatent > 0 && kV > 0, "mla_v_up: sizes must be positive");
  if (tokens <= 0) return;
  if constexpr (kV % 16 == 0) {
    if (tokens <= detail::kStreamPassTokens) {
      switch (detail::token_tiles_for(tokens)) {
        case 1: detail::launch_mla_v_up_stream<kHeads, kLatent, kV, 1>(o_lat, w_uv, out, tokens, stream); break;
        case 2: detail::launch_mla_v_up_stream<kHeads, kLatent, kV, 2>(o_lat, w_uv, out, tokens, stream); break;
        case 4: detail::launch_mla_v_up_stream<kHeads, kLatent, kV, 4>(o_lat, w_uv, out, tokens, stream); break;
        default: detail::launch_mla_v_up_stream<kHeads, kLatent, kV, 8>(o_lat, w_uv, out, tokens, stream); break;
      }
      return;
    }
  }
  if constexpr (kLatent % 8 == 0) {
    using P = detail::MlaVUpGemm<kHeads, kLatent, kV>;
    const dim3 grid(detail::ceil_div(kV, 64), detail::ceil_div(tokens, 64), kHeads);
    detail::launch_tile_gemm<P, 64>(typename P::Args{o_lat, w_uv, out, tokens}, grid, stream);
  } else {
    const long long items = static_cast<long long>(tokens) * kHeads * kV;
    auto kernel = detail::mla_v_up_simple_kernel<kHeads, kLatent, kV>;
    KILN_LAUNCH(kernel, static_cast<int>(detail::ceil_div_ll(items, 256)), 256, 0, stream, o_lat, w_uv, out, items);
  }
}

}  // namespace kiln
