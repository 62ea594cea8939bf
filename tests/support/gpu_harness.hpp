// Shared pieces of the GPU test programs (tests/kernels, tests/kernels_deepseek, tests/serving) and
// the kernel benchmark: device buffers, random bf16 data, poisoning, the NMSE check, CUDA-event
// timing, weights rotated beyond L2, and the one-line report per op.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/step_batch.hpp"

namespace kiln::kernel_test {

#define KILN_CUDA_OK(call)                                                                          \
  do {                                                                                              \
    const cudaError_t status_ = (call);                                                             \
    if (status_ != cudaSuccess) {                                                                   \
      std::printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(status_));   \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(count) {
    KILN_CUDA_OK(cudaMalloc(&ptr_, sizeof(T) * (count ? count : 1)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  void upload(const std::vector<T>& host) {
    KILN_CUDA_OK(cudaMemcpy(ptr_, host.data(), sizeof(T) * host.size(), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    KILN_CUDA_OK(cudaMemcpy(host.data(), ptr_, sizeof(T) * count_, cudaMemcpyDeviceToHost));
    return host;
  }
  // Every byte 0xFF: a NaN in bf16 and in fp32, so an element the kernel does not write shows.
  void poison() { KILN_CUDA_OK(cudaMemset(ptr_, 0xFF, sizeof(T) * (count_ ? count_ : 1))); }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

inline const __nv_bfloat16* as_bf16(const DeviceBuffer<uint16_t>& b) {
  return reinterpret_cast<const __nv_bfloat16*>(b.get());
}
inline __nv_bfloat16* as_bf16_mut(DeviceBuffer<uint16_t>& b) { return reinterpret_cast<__nv_bfloat16*>(b.get()); }

// Normal(0, scale) values rounded to bf16 (never zeros: a test on zeros proves nothing).
std::vector<uint16_t> random_bf16(size_t count, std::mt19937& rng, float scale = 1.0f);
std::vector<float> random_f32(size_t count, std::mt19937& rng, float scale = 1.0f);
std::vector<float> bf16_to_f32(const std::vector<uint16_t>& v);

// The step of a batch of sequences over a paged cache: sequence s has seqs[s].first tokens already
// in the cache and seqs[s].second fresh ones (those the step computes). Pages are handed out in
// shuffled order from a pool of `num_pages` (two more than needed, never used), and the block tables
// are one page wider than needed and padded with -1, so a kernel that assumes contiguous pages or a
// tight stride, or reads past a sequence's pages, fails.
struct PagedStep {
  StepBuffer buffer;
  StepBatch step;  // a view of `buffer`
  int num_pages = 0;
};
PagedStep paged_step(const std::vector<std::pair<int, int>>& seqs, int page_size, std::mt19937& rng,
                     StepPhase phase = StepPhase::prefill);

// "cached+fresh,..." for a report line.
std::string seq_list(const std::vector<std::pair<int, int>>& seqs);

// "names = v1 v2 ..." for a report line, e.g. dims({kDim, rows}, "dim rows").
std::string dims(std::initializer_list<long long> values, const char* names);

// "v1,v2,..." for a report line.
template <typename T>
std::string join(const std::vector<T>& values) {
  std::string s;
  for (const T& v : values) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

struct Comparison {
  double nmse = 0.0;     // Σ(ref − got)² / Σ ref²
  long long nans = 0;    // NaN in got: unwritten (poisoned) or produced
  double max_abs = 0.0;  // largest |ref − got|
};
Comparison compare(const std::vector<float>& ref, const std::vector<float>& got);

// Records a check; prints FAIL lines. `limit` bounds the NMSE; any NaN fails.
bool expect_close(const std::string& what, const Comparison& c, double limit);
bool expect(bool ok, const std::string& what);
int failures();
// Waits for the device and records a check that the launches so far raised no error (a launch with
// nothing to do must launch nothing: a zero-sized grid is an error); the FAIL line names the error.
bool expect_clean_launch(const std::string& what);

// KILN_GPU_TEST_QUICK (set by tools/gpu/compute_sanitizer.sh, where a launch takes seconds):
// timings launch once, without warm-up (they mean nothing there; the checks around them still run),
// and the few cases whose largest shapes take many minutes leave those out, keeping smaller shapes
// that take the same code paths.
bool quick_run();

// Median time in microseconds of `launch(iteration)` over `iterations` runs after `warmup` runs,
// each run between its own pair of CUDA events on the default stream; one run under quick_run().
double median_us(const std::function<void(int)>& launch, int warmup = 5, int iterations = 25);

// Mean time in microseconds of one `launch(iteration, stream)` when `iterations` of them run back
// to back inside one CUDA graph, the way a decode step runs its kernels (launch gaps included, no
// CPU launch cost); the median over `replays` replays of the graph.
double graph_us(const std::function<void(int, cudaStream_t)>& launch, int iterations = 20, int replays = 7);

// How many copies of a `bytes`-sized input make the rotation larger than L2 (3× its size), so
// bandwidth timings read from DRAM.
int copies_beyond_l2(size_t bytes);

// Device copies of a bf16 weight tensor, copies_beyond_l2 of them: rotating over them in a timed
// loop makes each call read its weights from DRAM, as a decode step does. Build it once per
// weight tensor (the copies take 3× L2), not once per timed shape.
class RotatingWeights {
 public:
  explicit RotatingWeights(const DeviceBuffer<uint16_t>& source);
  const __nv_bfloat16* at(int i) const { return as_bf16(buffer_) + elems_ * static_cast<size_t>(i % copies_); }

 private:
  size_t elems_;
  int copies_;
  DeviceBuffer<uint16_t> buffer_;
};

// One line per measured op: name, shape, NMSE, time, and GB/s (bytes > 0) or TFLOP/s (flops > 0).
void report(const std::string& op, const std::string& shape, double nmse, double us, double bytes, double flops);

// Device-to-device cudaMemcpy bandwidth (bytes read + written per second), in GB/s.
double measure_copy_gbps();

// Prints the device line and returns true; without a CUDA device prints "no GPU: skipped" and
// returns false (the caller then exits 77, which ctest reports as skipped).
bool print_device_or_skip();

// A named set of checks of a GPU test program.
struct TestGroup {
  const char* name;
  std::function<void()> run;
};

// The main of a GPU test program: `program [group...]` runs the named groups (default: all), each
// under a "---- name ----" header. Returns the exit code: 77 without a GPU, 2 for an unknown group,
// 1 when any check failed, 0 otherwise.
int run_test_groups(const char* program, int argc, char** argv, const std::vector<TestGroup>& groups);

}  // namespace kiln::kernel_test
