// Warpgroup-level tensor-core primitives of Hopper (sm_90a: wgmma.mma_async), and the mbarriers
// that pace the copies feeding them, for the prefill attention and the grouped GEMM. A warpgroup is
// 4 consecutive warps starting at a warp index divisible by 4; one wgmma multiplies 64 rows (warp w
// of the group: rows 16w..16w+15) by an N-column B held in shared memory, A from registers
// (wgmma_bf16) or from shared memory like B (wgmma_bf16_ss). The register layouts are mma.sync's
// (mma.cuh), per warp:
//   A (64×16, from registers)  a[0..3] as mma.sync's A fragment of the warp's 16 rows
//   D (64×N, fp32)             d[4j + 0..1] = D[g][8j + 2q, +1], d[4j + 2..3] = D[g + 8][8j + 2q, +1]
// so S = Q·Kᵀ's accumulators are P's A fragments once packed to bf16, as in the mma.sync kernel.
//
// B's shared-memory layout is the 128-byte swizzle: rows of 64 bf16 (128 bytes, 1024-byte aligned
// groups of 8 rows), the 16-byte chunk c of row r stored at chunk c ^ (r % 8). A tile of R rows and
// D = 64·m columns is m such areas of R × 128 bytes one after another (swizzled_offset). Read as
//   K-major (S = Q·Kᵀ, B[k = d][n = key] = K[key][d]): 8 keys at 128 bytes, groups of 8 at 1024
//     bytes (SBO); a k16 step is 32 bytes further into the row, or the next area every 4 steps;
//   MN-major (O = P·V, B[k = key][n = d] = V[key][d], "transposed"): 64 columns along the row, the
//     next 64 one area further (LBO = R · 128 bytes); k = key rows at 128 bytes, groups of 8 at
//     1024 bytes (SBO); a k16 step is 16 rows (2048 bytes) further.
// The descriptor's fields (PTX ISA, "matrix descriptor"): start address, LBO and SBO in 16-byte
// units at bits 0, 16 and 32; the swizzle mode at bits 62-63 (1: 128 bytes).
//
// Bits: a wgmma k16 step sums like mma.sync m16n8k16 (measured on an H200, bench/RESULTS.md
// 2026-12-01): given the same 16 columns in a k16 step the two give the same fp32 results (and
// mma.sync's did not change with the order of the columns in its slots); which columns share a
// step changes them. So a wgmma kernel gives mma.cuh's GEMV bits (mma_row_chunk: columns 8q..8q+3
// of each lane's chunk in one step, 8q+4..8q+7 in the next) only if its B tile groups the columns
// the same way.
#pragma once

#include "templates/common.cuh"

namespace kiln::detail {

// Whether this compile may emit wgmma (the sm_90a target; compute_80 / compute_90 PTX may not).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KILN_WGMMA 1
#else
#define KILN_WGMMA 0
#endif

// Whether the current device runs the sm_90a code that every build of the templates carries
// (compute capability 9.0: H100, H200); other devices run PTX compiled for compute_80 or
// compute_90, which has no wgmma. Asked once per process (one kind of GPU a process).
inline bool wgmma_device() {
#ifdef __CUDACC_RTC__
  return true;
#else
  static const bool hopper = [] {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) return false;
    return major == 9 && minor == 0;
  }();
  return hopper;
#endif
}

constexpr int kSwizzleRowBytes = 128;     // one row of a swizzled area: 64 bf16
constexpr int kSwizzleGroupBytes = 1024;  // 8 rows: the pattern's period, and the alignment it needs

// Byte offset of 16-byte chunk `chunk` (8 bf16 from column 8·chunk) of row `row` in a tile of
// `rows` rows (rows a multiple of 8), in the 128-byte swizzle.
__host__ __device__ constexpr int swizzled_offset(int rows, int row, int chunk) {
  return (chunk / 8) * rows * kSwizzleRowBytes + row * kSwizzleRowBytes + (((chunk % 8) ^ (row % 8)) << 4);
}

// A shared-memory pointer as the 32-bit address PTX's shared-state-space operands take.
__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ unsigned long long wgmma_descriptor(const void* smem, int lbo_bytes, int sbo_bytes) {
  using u64 = unsigned long long;
  const unsigned address = shared_address(smem);
  return static_cast<u64>((address >> 4) & 0x3FFF) | static_cast<u64>((lbo_bytes >> 4) & 0x3FFF) << 16 |
         static_cast<u64>((sbo_bytes >> 4) & 0x3FFF) << 32 | 1ull << 62;
}

// The descriptor of the same layout `bytes` further on (a multiple of 16). The start address field
// holds shared-memory addresses up to 256 KB, more than a block has, so the add never carries out.
__device__ __forceinline__ unsigned long long descriptor_plus(unsigned long long descriptor, int bytes) {
  return descriptor + static_cast<unsigned long long>(bytes >> 4);
}

// K tiles of `rows` keys read K-major, from `tile`; k16 step kk of such a tile starts
// k_major_step_bytes(rows, kk) further on.
__device__ __forceinline__ unsigned long long k_major_descriptor(const void* tile) {
  return wgmma_descriptor(tile, 16, kSwizzleGroupBytes);
}
__host__ __device__ constexpr int k_major_step_bytes(int rows, int kk) {
  return (kk / 4) * rows * kSwizzleRowBytes + (kk % 4) * 32;
}

// V tiles of `rows` keys read MN-major, from `tile`; k16 step kk (keys 16·kk..16·kk+15) starts
// mn_major_step_bytes(kk) further on.
__device__ __forceinline__ unsigned long long mn_major_descriptor(const void* tile, int rows) {
  return wgmma_descriptor(tile, rows * kSwizzleRowBytes, kSwizzleGroupBytes);
}
__host__ __device__ constexpr int mn_major_step_bytes(int kk) { return kk * 16 * kSwizzleRowBytes; }

// Shared memory written through the generic proxy (st.shared, cp.async) that wgmma, the async
// proxy, reads next: the fence stands between the writes' publication and the wgmma, in each
// writing thread before a block barrier, or in each reading thread after its mbarrier wait.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if KILN_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Before the first wgmma of a batch: the registers it reads or accumulates into are written.
__device__ __forceinline__ void wgmma_fence() {
#if KILN_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if KILN_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most kPending committed batches are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#if KILN_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Registers a wgmma writes asynchronously: an empty asm that "writes" each one, placed after the
// wait, so that the compiler reads none of them before it (nor moves writes past the issue).
template <int kN>
__device__ __forceinline__ void wgmma_fence_registers(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// mbarriers in shared memory (sm_80+): a phase completes once `count` arrivals are in; waiters
// name the phase by its parity. cp_async_arrive counts as the executing thread's arrival once all
// its earlier cp.async copies have landed (.noinc: `count` includes these arrivals).
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(unsigned long long* bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(shared_address(bar))
               : "memory");
}
__device__ __forceinline__ void cp_async_arrive(unsigned long long* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(bar)) : "memory");
}
// (try_wait, which suspends the thread a while in hardware, is sm_90's; the sm_80 PTX polls.)
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, int parity) {
  unsigned done = 0;
  do {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
#else
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
#endif
  } while (!done);
}

#define KILN_F4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define KILN_F16(d, i) KILN_F4(d, i), KILN_F4(d, i + 4), KILN_F4(d, i + 8), KILN_F4(d, i + 12)

// d (+)= a · B, m64 × kN × k16, bf16 in, fp32 out; accumulate = 0 overwrites d. kTransB: B is
// MN-major (1) or K-major (0).
template <int kN, int kTransB>
__device__ __forceinline__ void wgmma_bf16(float (&d)[kN / 2], const unsigned (&a)[4], unsigned long long b,
                                           int accumulate) {
  static_assert(kN == 64 || kN == 128, "wgmma_bf16: N of 64 or 128");
#if KILN_WGMMA
  if constexpr (kN == 64) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %36, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %37, p, 1, 1, %38;\n}\n"
        : KILN_F16(d, 0), KILN_F16(d, 16)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(accumulate), "l"(b), "n"(kTransB));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %68, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %69, p, 1, 1, %70;\n}\n"
        : KILN_F16(d, 0), KILN_F16(d, 16), KILN_F16(d, 32), KILN_F16(d, 48)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(accumulate), "l"(b), "n"(kTransB));
  }
#else
  __trap();  // never runs: the host launches it on compute capability 9.0 only, which runs the sm_90a code
#endif
}

// d (+)= A · B, m64 × 128 × k16, A and B K-major in shared memory (descriptors a, b).
__device__ __forceinline__ void wgmma_bf16_ss(float (&d)[64], unsigned long long a, unsigned long long b,
                                              int accumulate) {
#if KILN_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : KILN_F16(d, 0), KILN_F16(d, 16), KILN_F16(d, 32), KILN_F16(d, 48)
      : "l"(a), "l"(b), "r"(accumulate));
#else
  __trap();  // never runs (as wgmma_bf16)
#endif
}

#undef KILN_F16
#undef KILN_F4

}  // namespace kiln::detail
