// Hopper's tensor copy engine (TMA, sm_90a), for the grouped GEMM's weight tiles: a 2D box of a
// bf16 matrix copied into shared memory in the 128-byte swizzle (wgmma.cuh's layout), its bytes
// counted on an mbarrier. One thread issues a copy of many rows, where cp.async takes 16 bytes a
// thread and instruction.
#pragma once

#include "templates/blocks/wgmma.cuh"
#include "templates/common.cuh"

#ifndef __CUDACC_RTC__
#include <cudaTypedefs.h>  // the driver's CUtensorMap and its encoder's type (found through the runtime)

#include <cstring>
#endif

namespace kiln::detail {

// A CUtensorMap's 128 bytes as a kernel takes them (a __grid_constant__ parameter): the driver's
// type is host-only, and NVRTC compiles these templates too.
struct alignas(64) TmaMap {
  unsigned long long opaque[16];
};

// The 2D copies a TmaMap describes go in boxes of kTmaBoxCols columns (one 128-byte swizzled row).
constexpr int kTmaBoxCols = 64;

// After mbarrier_init, before the tensor copy engine may signal the barrier.
__device__ __forceinline__ void fence_mbarrier_init() {
#if KILN_WGMMA
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// The executing thread's arrival on `bar`, which also expects `bytes` more of copies to land on it
// (the phase completes once the arrivals and the bytes are all in; bytes may land before this).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
#if KILN_WGMMA
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
#endif
}

// The box at column x, row y of `map` into `smem`, its bytes counted on `bar`.
__device__ __forceinline__ void tma_load_2d(void* smem, const TmaMap* map, int x, int y, unsigned long long* bar) {
#if KILN_WGMMA
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          shared_address(smem)),
      "l"(map), "r"(x), "r"(y), "r"(shared_address(bar))
      : "memory");
#endif
}

#ifndef __CUDACC_RTC__
// The map of a bf16 matrix [rows][cols] (rows cols · 2 bytes apart; base 16-byte aligned, cols a
// multiple of 8) read in boxes of box_rows × kTmaBoxCols into the 128-byte swizzle; coordinates past
// the matrix read zeros. False where the driver has no encoder or refuses the matrix.
inline bool bf16_rows_tma_map(const void* base, long long rows, int cols, int box_rows, TmaMap& out) {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (encode == nullptr) return false;
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {kTmaBoxCols, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  if (encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    return false;
  }
  static_assert(sizeof(CUtensorMap) == sizeof(TmaMap), "TmaMap holds a CUtensorMap");
  std::memcpy(&out, &map, sizeof map);
  return true;
}
#endif

}  // namespace kiln::detail
