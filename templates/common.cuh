// What every kernel template shares: the bf16 alias, the stream type, the launch macro, and small
// device helpers (vector loads chosen from divisibility, bf16 <-> fp32, warp reductions).
//
// Every template header compiles under nvcc and under NVRTC (-default-device, the CI check of
// generated kernels.cu): under NVRTC there is no runtime API, host launchers become device
// functions, and a "launch" only names the kernel, which instantiates it.
#pragma once

#include <cuda_bf16.h>

#include "codegen/op_shapes.hpp"

#ifdef __CUDACC_RTC__
typedef struct CUstream_st* cudaStream_t;
#else
#include <cuda_runtime.h>

#include <atomic>
#include <utility>
#endif

namespace kiln {
using bf16 = __nv_bfloat16;
}

// The kernel argument must be a single token (a local function pointer): template argument lists
// carry commas that the preprocessor would split. Under NVRTC the other arguments are evaluated and
// dropped, so that launchers compile without unused-variable warnings.
#ifdef __CUDACC_RTC__
namespace kiln::detail {
template <typename... Args>
__device__ inline void discard_launch_args(const Args&...) {}
}  // namespace kiln::detail
#define KILN_LAUNCH(kernel, grid, block, smem, stream, ...) \
  ((void)(kernel), kiln::detail::discard_launch_args(grid, block, smem, stream, __VA_ARGS__))
#else
#define KILN_LAUNCH(kernel, grid, block, smem, stream, ...) \
  kiln::detail::launch_dependent(kernel, grid, block, smem, stream, __VA_ARGS__)
#endif

// Programmatic dependent launch (Hopper). A decode step is a chain of short kernels, and between
// two of them the GPU used to drain: the next kernel's blocks were scheduled only once the last
// block of the one before had ended and its writes were flushed, a few microseconds of idle HBM per
// op. KILN_LAUNCH launches every template kernel as a programmatic dependent of the kernel before
// it in the stream: its blocks may start while that kernel still runs, do work that reads nothing
// another kernel of the step writes (a GEMV requests its first weights), and then wait.
//
// Every kernel releases its dependents first thing (pdl_release_and_wait), so the next kernel's
// blocks are scheduled as soon as all of this one's have started, not once they have waited: a
// GEMV after a small op (an RMSNorm, the attention, silu·mul) is resident, and requesting its
// weights, while the op before the small one still runs, and HBM stays busy across the small
// ops. (Released after the wait instead, Llama-3.1-8B Q4_0 decoded at 2.114 ms a token against
// 1.979, Q8_0 2.984 against 2.892, Q4_K_M 2.755 against 2.609: H200, bench/RESULTS.md 2026-11-27
// seventh session.) Several kernels of a step may so be in flight at once, each in its wait.
//
// The contract every __global__ of templates/ keeps (tests/codegen/test_templates_pdl.cpp checks
// that each waits): on every path, the wait comes before its first read of anything a kernel of
// the step writes, before its first write, and before it returns. Before the wait it reads only
// what was complete before the stream's last plain operation (a copy, the start of a graph, a
// plain launch as cuBLASLt's and NCCL's): weights, and, in the decode attention, the step's arrays
// and the cache's earlier tokens (prep_attention.cuh). pdl_wait() returns once the kernels before
// it in the stream have completed and their writes are visible; since each of them waited on its
// own predecessor before completing, that holds transitively, so a kernel that waits is ordered
// after the whole stream, exactly as a plain launch. Launched without the attribute (a plain
// launch; pre-Hopper; or the run's --no-pdl), both are no-ops.
namespace kiln::detail {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The opening of every kernel: let the next kernel's blocks start, then wait for this one's inputs.
__device__ __forceinline__ void pdl_release_and_wait() {
  pdl_release();
  pdl_wait();
}

#ifndef __CUDACC_RTC__
// Whether KILN_LAUNCH asks for programmatic dependent launches (--no-pdl clears it; read at each
// launch, so a graph captured after a change keeps the setting it was captured with).
inline bool launch_with_pdl = true;

template <typename... Params, typename... Args>
inline void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = launch_with_pdl ? 1 : 0;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  // Errors are the runtime's last error, read where the caller reads a <<<>>> launch's.
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}
#endif

}  // namespace kiln::detail

namespace kiln::detail {

constexpr float kLog2e = 1.4426950408889634f;  // softmax runs in base 2: exp(x) = exp2(x · log2 e)
// Threads per block of the element-wise kernels (one thread per vector of values): large enough to
// hide latency, small enough that short rows still spread over the SMs.
constexpr int kElementwiseThreads = 256;
// The kernels that give one warp a row (a token, a (token, head) pair): blocks of kWarpRowThreads
// threads, kWarpRowsPerBlock rows each.
constexpr int kWarpRowThreads = 128;
constexpr int kWarpRowsPerBlock = kWarpRowThreads / 32;
__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
__host__ __device__ constexpr long long ceil_div_ll(long long a, long long b) { return (a + b - 1) / b; }
__host__ __device__ constexpr int min_int(int a, int b) { return a < b ? a : b; }
__host__ __device__ constexpr int max_int(int a, int b) { return a > b ? a : b; }
__host__ __device__ constexpr int round_up(int a, int b) { return ceil_div(a, b) * b; }
__host__ __device__ constexpr int gcd_int(int a, int b) { return b == 0 ? a : gcd_int(b, a % b); }

// Widest access (in elements) that keeps every row start of a `count`-element row aligned, for
// elements of `elem_bytes`, capped at 16 bytes: 8 bf16 when count % 8 == 0, else 4, 2 or 1.
__host__ __device__ constexpr int vec_width(int count, int elem_bytes) {
  int width = 16 / elem_bytes;
  while (width > 1 && count % width != 0) width /= 2;
  return width;
}

// Smallest power of two >= n.
__host__ __device__ constexpr int pow2_ceil(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// ---- vector loads and stores of N consecutive elements (N * size a power of two <= 16 bytes) ----

template <int N>
struct BitsOf;  // an unsigned type of N * 2 bytes, for bf16 vectors
template <>
struct BitsOf<1> { using type = unsigned short; };
template <>
struct BitsOf<2> { using type = unsigned int; };
template <>
struct BitsOf<4> { using type = uint2; };
template <>
struct BitsOf<8> { using type = uint4; };

template <int N>
__device__ __forceinline__ void load_bf16(const bf16* p, float (&out)[N]) {
  using Bits = typename BitsOf<N>::type;
  const Bits bits = *reinterpret_cast<const Bits*>(p);
  const bf16* v = reinterpret_cast<const bf16*>(&bits);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = __bfloat162float(v[i]);
}

template <int N>
__device__ __forceinline__ void store_bf16(bf16* p, const float (&in)[N]) {
  using Bits = typename BitsOf<N>::type;
  Bits bits;
  bf16* v = reinterpret_cast<bf16*>(&bits);
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = __float2bfloat16_rn(in[i]);
  *reinterpret_cast<Bits*>(p) = bits;
}

// The raw bits first, the conversion later: lets a kernel put several loads in flight before it
// spends registers on fp32 copies.
template <int N>
__device__ __forceinline__ typename BitsOf<N>::type load_bits(const bf16* p) {
  return *reinterpret_cast<const typename BitsOf<N>::type*>(p);
}

template <int N>
__device__ __forceinline__ void unpack_bf16(const typename BitsOf<N>::type& bits, float (&out)[N]) {
  const bf16* v = reinterpret_cast<const bf16*>(&bits);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = __bfloat162float(v[i]);
}

template <int N>
struct FloatBitsOf;  // N floats
template <>
struct FloatBitsOf<1> { using type = float; };
template <>
struct FloatBitsOf<2> { using type = float2; };
template <>
struct FloatBitsOf<4> { using type = float4; };

// N (1, 2 or 4) consecutive floats as one load / store of N·4 bytes.
template <int N>
__device__ __forceinline__ void load_f32(const float* p, float (&out)[N]) {
  using Bits = typename FloatBitsOf<N>::type;
  const Bits bits = *reinterpret_cast<const Bits*>(p);
  const float* v = reinterpret_cast<const float*>(&bits);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = v[i];
}

template <int N>
__device__ __forceinline__ void store_f32(float* p, const float (&in)[N]) {
  using Bits = typename FloatBitsOf<N>::type;
  Bits bits;
  float* v = reinterpret_cast<float*>(&bits);
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = in[i];
  *reinterpret_cast<Bits*>(p) = bits;
}

// -inf without <cmath> (not available under NVRTC).
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

// 2^x on the special-function unit alone (ex2.approx.ftz: 2 ulp; subnormal inputs and results
// flush to zero), where exp2f adds instructions for subnormals around the same approximation.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---- reductions ----

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Inclusive prefix sum over the lanes of a warp: lane i gets v of lanes 0..i.
__device__ __forceinline__ int warp_inclusive_sum(int v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    const int u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

// Sum over a block of kThreads (a multiple of 32); every thread gets the total. `scratch` holds
// kThreads / 32 floats; the call ends with the block synchronized so scratch can be reused.
template <int kThreads>
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block_sum: whole warps, at most 1024 threads");
  constexpr int kWarps = kThreads / 32;
  v = warp_sum(v);
  if constexpr (kWarps == 1) {
    return v;
  } else {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += scratch[w];  // same order in every thread
    __syncthreads();
    return total;
  }
}

#ifndef __CUDACC_RTC__
// A value of the current device read once per device (64 at most) and kept in `known` (value + 1;
// 0 while unknown): read(device) returns it, or a negative value when the read failed (asked
// again next time). -1 when the device is unknown or the read failed.
template <typename Read>
inline int per_device_once(std::atomic<int> (&known)[64], Read&& read) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device >= 64) return -1;
  int value = known[device].load(std::memory_order_relaxed) - 1;
  if (value < 0) {
    value = read(device);
    if (value < 0) return -1;
    known[device].store(value + 1, std::memory_order_relaxed);
  }
  return value;
}
#endif

// Whether a block on the current device may opt in to `bytes` of shared memory (Hopper: 227 KB;
// A100: 163 KB; sm_86/89: 99 KB), read once per device. Kernels sized for Hopper ask first and keep
// a smaller path elsewhere. Under NVRTC (the compile check): true.
inline bool device_smem_fits(int bytes) {
#ifndef __CUDACC_RTC__
  static std::atomic<int> optin[64] = {};
  const int limit = per_device_once(optin, [](int device) {
    int value = 0;
    return cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess ? value : -1;
  });
  return limit >= 0 && bytes <= limit;
#else
  (void)bytes;
  return true;
#endif
}

// How many blocks of kKernel (kThreads threads, kBytes of dynamic shared memory, its limit already
// raised) the current device holds at once over all its SMs, read once per device; 0 when unknown.
// Kernels whose grid would otherwise be mostly blocks with nothing to do size it from this.
// Under NVRTC (the compile check): 0.
template <auto kKernel, int kThreads, int kBytes>
inline int device_resident_blocks() {
#ifndef __CUDACC_RTC__
  static std::atomic<int> known[64] = {};
  const int blocks = per_device_once(known, [](int device) {
    int per_sm = 0, sms = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, kThreads, kBytes) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      return -1;
    }
    return per_sm * sms;
  });
  return blocks < 0 ? 0 : blocks;
#else
  return 0;
#endif
}

// The bytes of local memory (spilled registers, a stack frame) a thread of kKernel's build keeps;
// kUnknownLocalBytes when unknown. Read once (the build is the same on every device of the
// process). Under NVRTC: unknown.
constexpr int kUnknownLocalBytes = 0x7fffffff;
template <auto kKernel>
inline int kernel_local_bytes() {
#ifndef __CUDACC_RTC__
  static const int bytes = [] {
    cudaFuncAttributes attributes{};
    return cudaFuncGetAttributes(&attributes, kKernel) != cudaSuccess ? kUnknownLocalBytes
                                                                      : static_cast<int>(attributes.localSizeBytes);
  }();
  return bytes;
#else
  return kUnknownLocalBytes;
#endif
}

// Whether kKernel's build keeps anything in local memory: a build bounded to fewer registers than
// it wants is used only where it keeps them all. Under NVRTC: true.
template <auto kKernel>
inline bool kernel_spills() {
  return kernel_local_bytes<kKernel>() > 0;
}

// Raises kKernel's dynamic shared-memory limit to kBytes (above the 48 KiB default) before its
// first launch on the current device, once per device: the attribute belongs to the function as
// the current device holds it, so a tensor-parallel process (one thread per GPU) sets it on each
// GPU (set once per process, the kernels of every GPU but the first failed to launch). The kernel
// is a template argument so that each instantiation keeps its own flags (instantiations often
// share a function type). Under NVRTC (the compile check) there is nothing to set.
template <auto kKernel, int kBytes>
inline void allow_dynamic_smem_once() {
#ifndef __CUDACC_RTC__
  if constexpr (kBytes > 48 * 1024) {
    static std::atomic<unsigned long long> devices_done{0};  // bit d: set on device d (< 64)
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return;  // the launch reports it
    const unsigned long long bit = device < 64 ? 1ull << device : 0;
    if (bit != 0 && (devices_done.load(std::memory_order_relaxed) & bit) != 0) return;
    if (cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes) == cudaSuccess) {
      devices_done.fetch_or(bit, std::memory_order_relaxed);
    }
  }
#endif
}

}  // namespace kiln::detail
