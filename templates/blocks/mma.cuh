// Warp-level tensor-core and async-copy primitives (sm_80+: mma.sync, ldmatrix, cp.async), shared
// by the GEMV and the prefill attention. Nothing here is Hopper-only, so the same code serves the
// sm_90a build and the compute_80 PTX.
//
// mma.sync m16n8k16, bf16 inputs, fp32 accumulators. Lane = 4·g + q (g = lane / 4, q = lane % 4):
//   A (16×16, row-major)  a[0] = A[g][2q, 2q+1]      a[1] = A[g+8][2q, 2q+1]
//                         a[2] = A[g][2q+8, 2q+9]    a[3] = A[g+8][2q+8, 2q+9]
//   B (16×8, "col")       b[0] = B[2q, 2q+1][g]      b[1] = B[2q+8, 2q+9][g]
//   C (16×8)              c[0..1] = C[g][2q, 2q+1]   c[2..3] = C[g+8][2q, 2q+1]
// (each b16 pair packed in one 32-bit register, the lower column / row in the low half).
#pragma once

#include "templates/common.cuh"
#include "templates/gemv_plan.hpp"

namespace kiln::detail {

// The streaming kernels (GEMV, routed experts, MLA v_up at decode) read the weights once per pass
// of up to kStreamPassTokens token rows: token_tiles_for(n) tiles of 8 (the mma's n).
constexpr int kStreamPassTokens = kGemvPassTokens;
__host__ __device__ constexpr int token_tiles_for(int tokens) {
  return tokens <= 8 ? 1 : tokens <= 16 ? 2 : tokens <= 32 ? 4 : 8;
}

// Runs launch(TokenTiles<n>{}) with n = token_tiles_for(tokens): one instantiation per tile count,
// chosen at run time from the pass's token count.
template <int kTiles>
struct TokenTiles {
  static constexpr int value = kTiles;
};
template <typename Launch>
inline void with_token_tiles(int tokens, Launch&& launch) {
  switch (token_tiles_for(tokens)) {
    case 1: launch(TokenTiles<1>{}); break;
    case 2: launch(TokenTiles<2>{}); break;
    case 4: launch(TokenTiles<4>{}); break;
    default: launch(TokenTiles<8>{}); break;
  }
}

__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// acc += the two k16 steps of one lane's 8 columns: weight rows g and g + 8 (a0, a1: 8 bf16 each)
// times a token's 8 values (b), the columns fed as the lane's k slots (2q, 2q+1, 2q+8, 2q+9) of
// both steps, the same permutation on both sides (linear.cuh says why that is right).
__device__ __forceinline__ void mma_row_chunk(float (&acc)[4], const uint4& a0, const uint4& a1, const uint4& b) {
  const unsigned a_lo[4] = {a0.x, a1.x, a0.y, a1.y};  // columns 8q..8q+3
  const unsigned a_hi[4] = {a0.z, a1.z, a0.w, a1.w};  // columns 8q+4..8q+7
  const unsigned b_lo[2] = {b.x, b.y};
  const unsigned b_hi[2] = {b.z, b.w};
  mma_bf16_16816(acc, a_lo, b_lo);
  mma_bf16_16816(acc, a_hi, b_hi);
}

// The same two k16 steps into separate sums: the lane's first four columns into lo, its last four
// into hi (a format with a scale per 16 columns multiplies each by its own).
__device__ __forceinline__ void mma_row_halves(float (&lo)[4], float (&hi)[4], const uint4& a0, const uint4& a1,
                                               const uint4& b) {
  const unsigned a_lo[4] = {a0.x, a1.x, a0.y, a1.y};
  const unsigned a_hi[4] = {a0.z, a1.z, a0.w, a1.w};
  const unsigned b_lo[2] = {b.x, b.y};
  const unsigned b_hi[2] = {b.z, b.w};
  mma_bf16_16816(lo, a_lo, b_lo);
  mma_bf16_16816(hi, a_hi, b_hi);
}

// Two fp32 values as one bf16x2 register (lo in the low half), rounded to nearest even.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&v);
}

// 16 bytes from global memory that is read once: no L1 allocation, and a 256-byte L2 fetch so that
// neighbouring chunks (other warps' steps of the same row) arrive with it (the weights of a GEMV).
__device__ __forceinline__ uint4 load_streaming_16(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

// 8 bytes read once, as load_streaming_16 (Q6_K's high bits).
__device__ __forceinline__ uint2 load_streaming_8(const void* p) {
  uint2 r;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];\n" : "=r"(r.x), "=r"(r.y) : "l"(p));
  return r;
}

// Activations a kernel before this one in the step wrote, read after the PDL wait: coherent loads
// (ld.global), never the non-coherent path (ld.global.nc, __ldg). A .nc load promises that nothing
// writes its data while the kernel runs, which PDL breaks (the kernel before may still run until
// the wait returns), and ptxas acts on the promise: it moved a quantized GEMV's __ldg of its input
// rows above griddepcontrol.wait (Q5_0 | Q4_1 parts of tiny-deepseek-v2's gate_up, sm_90a, CUDA
// 13.0; the PTX had them after it), so in a CUDA graph the GEMV read the RMSNorm's output before it
// was written. Volatile, so that the compiler keeps them after the wait's asm too.
__device__ __forceinline__ uint4 load_after_wait_16(const void* p) {
  uint4 r;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
__device__ __forceinline__ uint2 load_after_wait_8(const void* p) {
  uint2 r;
  asm volatile("ld.global.v2.u32 {%0, %1}, [%2];\n" : "=r"(r.x), "=r"(r.y) : "l"(p));
  return r;
}
__device__ __forceinline__ unsigned short load_after_wait_2(const void* p) {
  unsigned short r;
  asm volatile("ld.global.u16 %0, [%1];\n" : "=h"(r) : "l"(p));
  return r;
}

// 4 bytes read once, as load_streaming_16 (Q5_0's fifth bits).
__device__ __forceinline__ unsigned load_streaming_4(const void* p) {
  unsigned r;
  asm("ld.global.nc.L1::no_allocate.L2::256B.u32 %0, [%1];\n" : "=r"(r) : "l"(p));
  return r;
}

// 8 consecutive bf16 of `row` from column `col` (a lane's chunk) as four bf16x2 registers; a chunk
// that is not `valid` or lies at or past kK reads as zeros. The 16-byte path is branch-free (the
// address is clamped, the value selected) so that the compiler keeps all loads of an unrolled
// group in flight; `row` must point at a real row. Narrower loads (kK % 8 != 0) keep every access
// aligned: kK % kVec == 0, so no vector straddles kK. How it loads:
//   streaming  weights read once (no L1 allocation)
//   after_wait activations written by an earlier kernel, coherent (load_after_wait_16 says why never
//              the read-only path)
//   plain      values written earlier in the same kernel, by other blocks or into shared memory
//              (the whole-step decode kernel's inputs), which the read-only path must not serve
enum class RowLoad { streaming, after_wait, plain };

template <int kK, int kVec, RowLoad kLoad>
__device__ __forceinline__ uint4 load_row_chunk(const bf16* row, int col, bool valid) {
  if constexpr (kVec == 8) {
    const bf16* p = row + min(col, kK - 8);
    const uint4 r = kLoad == RowLoad::streaming    ? load_streaming_16(p)
                    : kLoad == RowLoad::after_wait ? load_after_wait_16(p)
                                                   : *reinterpret_cast<const uint4*>(p);
    const bool keep = valid && col < kK;
    return make_uint4(keep ? r.x : 0u, keep ? r.y : 0u, keep ? r.z : 0u, keep ? r.w : 0u);
  } else {
    uint4 r = make_uint4(0u, 0u, 0u, 0u);
    if (!valid) return r;
    unsigned short* e = reinterpret_cast<unsigned short*>(&r);
    const unsigned short* src = reinterpret_cast<const unsigned short*>(row);
#pragma unroll
    for (int v = 0; v < 8; v += kVec) {
      if (col + v < kK) {
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          e[v + i] = kLoad == RowLoad::plain        ? src[col + v + i]
                     : kLoad == RowLoad::after_wait ? load_after_wait_2(src + col + v + i)
                                                    : __ldg(src + col + v + i);  // streaming: weights
        }
      }
    }
    return r;
  }
}

__device__ __forceinline__ unsigned smem_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// ldmatrix: four 8×8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, and each
// lane receives, per matrix, the pair of row (lane / 4), columns 2·(lane % 4) and +1.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(smem_row)));
}

// The same, transposed: each lane receives, per matrix, column (lane / 4), rows 2·(lane % 4), +1.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(smem_row)));
}

// 16-byte asynchronous copy global -> shared; `valid` false writes zeros (src-size 0).
__device__ __forceinline__ void cp_async_16(void* smem, const void* global, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem)), "l"(global),
               "r"(valid ? 16 : 0));
}

// The same for data read once (a GEMV's weights): a 256-byte L2 fetch, so that the row's next
// chunks (the copies of later rounds) find it in L2, as load_streaming_16's loads do.
__device__ __forceinline__ void cp_async_16_streaming(void* smem, const void* global, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem)), "l"(global),
               "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace kiln::detail
