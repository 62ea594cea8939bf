#include "runtime/parallel/nccl_collective.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <sstream>

#include "runtime/core/error.hpp"

namespace kiln {

// nccl_collective_kernels.cu: out[i] += in[i] for i < count, on `stream`; the launch's error.
cudaError_t nccl_collective_add_into(float* out, const float* in, int64_t count, cudaStream_t stream);

namespace {

// The current device for the scope, restored after (reserve_gather and the destructor run on the
// backend's thread for every rank).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&saved_) != cudaSuccess) saved_ = -1;
    status_ = cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (saved_ >= 0) cudaSetDevice(saved_);
  }
  cudaError_t status() const { return status_; }

 private:
  int saved_ = -1;
  cudaError_t status_;
};

std::string devices_text(const std::vector<int>& devices) {
  std::ostringstream s;
  for (size_t i = 0; i < devices.size(); ++i) s << (i ? ", " : "") << devices[i];
  return s.str();
}

// NCCL's symmetric windows: in the header this was built with (2.27+) and in the library it runs
// with.
#if defined(NCCL_WIN_COLL_SYMMETRIC)
constexpr bool kWindowsBuilt = true;
#else
constexpr bool kWindowsBuilt = false;
#endif
constexpr int kWindowsVersion = 22700;

bool windows_available() { return kWindowsBuilt && nccl_runtime_version() >= kWindowsVersion; }

std::string version_text(int code) {
  // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z since 2.9.
  std::ostringstream s;
  s << code / 10000 << '.' << code / 100 % 100 << '.' << code % 100;
  return s.str();
}

// Said once per process: tensor-parallel collectives run without NCCL's symmetric memory.
void note_no_windows(const std::string& why) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  std::fprintf(stderr,
               "kiln: %s: tensor-parallel collectives use cudaMalloc memory, without NCCL's symmetric kernels\n",
               why.c_str());
}

std::string no_windows_reason() {
  const int version = nccl_runtime_version();
  if (!kWindowsBuilt) return "kiln was built against an NCCL older than 2.27 (no symmetric memory windows)";
  return "NCCL " + (version > 0 ? version_text(version) : std::string("(version unknown)")) +
         " has no symmetric memory windows (2.27 or newer has)";
}

}  // namespace

int nccl_runtime_version() {
  static const int version = [] {
    int v = 0;
    return ncclGetVersion(&v) == ncclSuccess ? v : 0;
  }();
  return version;
}

// ---- NcclCollective ----------------------------------------------------------------------------

NcclCollective::NcclCollective(NcclGroup& group, int32_t rank, int device, ncclComm* comm, bool windows)
    : group_(group), rank_(rank), device_(device), comm_(comm), windows_enabled_(windows) {}

int32_t NcclCollective::size() const { return group_.size(); }

void NcclCollective::abort(const std::string& why) { group_.abort(why); }

void NcclCollective::fail_aborted(const char* what) const {
  fail("collective ", what, " on rank ", rank_, " of ", group_.size(), " (device ", device_,
       "): the tensor-parallel group was aborted: ", group_.why_);
}

ncclComm* NcclCollective::usable(const char* what) const {
  if (group_.aborted_.load()) fail_aborted(what);
  ncclComm* comm = comm_.load();
  if (comm == nullptr) fail_aborted(what);
  int current = -1;
  const cudaError_t status = cudaGetDevice(&current);
  if (status != cudaSuccess) {
    fail("collective ", what, " on rank ", rank_, ": cudaGetDevice failed: ", cudaGetErrorString(status));
  }
  if (current != device_) {
    fail("collective ", what, " on rank ", rank_, ": called with device ", current, " current, expected device ",
         device_, " (cudaSetDevice in the rank's thread)");
  }
  return comm;
}

namespace {

[[noreturn]] void fail_nccl(ncclResult_t result, const char* call, int32_t rank, int device, ncclComm* comm) {
  fail(call, " failed on rank ", rank, " (device ", device, "): ", ncclGetErrorString(result), " (",
       ncclGetLastError(comm), ")");
}

[[noreturn]] void fail_cuda(cudaError_t status, const char* call, int32_t rank, int device) {
  fail(call, " failed on rank ", rank, " (device ", device, "): ", cudaGetErrorName(status), " (",
       cudaGetErrorString(status), ")");
}

}  // namespace

void NcclCollective::all_reduce(float* partial, float* out, int64_t count, bool add, void* stream) {
  if (count < 0) fail("all_reduce on rank ", rank_, ": count ", count, ", expected >= 0");
  ncclComm* comm = usable("all_reduce");
  if (count == 0) return;  // every rank skips alike
  if (partial == nullptr || out == nullptr) fail("all_reduce on rank ", rank_, ": null buffer");
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const size_t n = static_cast<size_t>(count);
  if (!add) {
    const ncclResult_t r = ncclAllReduce(partial, out, n, ncclFloat, ncclSum, comm, s);
    if (r != ncclSuccess) fail_nccl(r, "ncclAllReduce", rank_, device_, comm);
    return;
  }
  // add: the sum in place into partial, then out += partial on the same stream.
  const ncclResult_t r = ncclAllReduce(partial, partial, n, ncclFloat, ncclSum, comm, s);
  if (r != ncclSuccess) fail_nccl(r, "ncclAllReduce (in place, for add)", rank_, device_, comm);
  const cudaError_t status = nccl_collective_add_into(out, partial, count, s);
  if (status != cudaSuccess) fail_cuda(status, "the out += Σ partial kernel of all_reduce", rank_, device_);
}

void NcclCollective::all_gather_columns(const float* shard, float* out, int64_t rows, int64_t cols, void* stream) {
  if (rows < 0 || cols < 0) fail("all_gather_columns on rank ", rank_, ": rows ", rows, ", cols ", cols, ", expected >= 0");
  ncclComm* comm = usable("all_gather_columns");
  const int64_t size = group_.size();
  if (rows == 0 || cols == 0) return;  // every rank skips alike
  if (cols > INT64_MAX / rows / size) fail("all_gather_columns on rank ", rank_, ": rows ", rows, " x cols ", cols, " overflows");
  if (shard == nullptr || out == nullptr) fail("all_gather_columns on rank ", rank_, ": null buffer");
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t block = rows * cols, need = block * size;

  // One row whose shard is outside out, or at one of out's column blocks: out is [size][cols],
  // exactly what ncclAllGather writes. A shard in out goes to this rank's block first (unless it
  // is there), then every rank gathers in place (NCCL's in-place form: this rank's block is the
  // send buffer), so that every rank's call has the same form whichever block the shard is at (on
  // windows every rank's buffers must be alike).
  const auto at = [](const float* p) { return reinterpret_cast<uintptr_t>(p); };
  const bool apart = at(shard + cols) <= at(out) || at(shard) >= at(out + need);
  const uintptr_t row_bytes = static_cast<uintptr_t>(cols) * sizeof(float);
  const bool at_block = !apart && at(shard) >= at(out) && (at(shard) - at(out)) % row_bytes == 0;
  if (rows == 1 && (apart || at_block)) {
    float* mine = out + rank_ * cols;
    if (at_block && shard != mine) {
      const cudaError_t status = cudaMemcpyAsync(mine, shard, row_bytes, cudaMemcpyDeviceToDevice, s);
      if (status != cudaSuccess) {
        fail_cuda(status, "cudaMemcpyAsync (the shard to this rank's block of out)", rank_, device_);
      }
    }
    const ncclResult_t r = ncclAllGather(apart ? shard : mine, out, static_cast<size_t>(cols), ncclFloat, comm, s);
    if (r != ncclSuccess) fail_nccl(r, "ncclAllGather", rank_, device_, comm);
    return;
  }

  // Larger gathers (a prefill's prompt logits) go through the staging in chunks of the rows it
  // holds, the last chunk first: with the shard packed at the start of out (in place), a chunk's
  // output rows lie at or past its own shard rows and clear of every earlier chunk's, and its own
  // shard rows are read into staging before its output is written (stream order).
  const int64_t chunk = std::min(rows, staging_floats_ / (size * cols));
  if (chunk == 0) {
    fail("all_gather_columns on rank ", rank_, ": one row of ", size, " ranks x cols ", cols, " needs ", size * cols,
         " floats of gather staging, ", staging_floats_,
         " reserved: call reserve_gather with the largest gather before the first call (and before capturing a graph)");
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const cudaError_t capturing = cudaStreamIsCapturing(s, &capture);
  if (capturing != cudaSuccess) fail_cuda(capturing, "cudaStreamIsCapturing", rank_, device_);
  if (capture != cudaStreamCaptureStatusNone) gather_captured_ = true;

  const size_t width = static_cast<size_t>(cols) * sizeof(float);
  for (int64_t end = rows; end > 0; end -= chunk) {
    const int64_t begin = std::max<int64_t>(0, end - chunk), n = end - begin, part = n * cols;
    // Staging [size][n][cols]: then rank q's [n, cols] block into out's columns [q·cols, (q+1)·cols).
    const ncclResult_t r =
        ncclAllGather(shard + begin * cols, staging_, static_cast<size_t>(part), ncclFloat, comm, s);
    if (r != ncclSuccess) fail_nccl(r, "ncclAllGather (into staging)", rank_, device_, comm);
    for (int64_t q = 0; q < size; ++q) {
      const cudaError_t status =
          cudaMemcpy2DAsync(out + begin * size * cols + q * cols, width * size, staging_ + q * part, width, width,
                            static_cast<size_t>(n), cudaMemcpyDeviceToDevice, s);
      if (status != cudaSuccess) fail_cuda(status, "cudaMemcpy2DAsync (staging to out columns)", rank_, device_);
    }
  }
}

void NcclCollective::reserve_gather(int64_t floats) {
  if (floats <= staging_floats_) return;
  if (group_.aborted_.load()) fail_aborted("reserve_gather");
  if (gather_captured_) {
    fail("reserve_gather(", floats, ") on rank ", rank_, ": ", staging_floats_,
         " floats are reserved and a captured graph gathers through them; reserve the largest gather before "
         "capturing");
  }
  DeviceScope scope(device_);
  if (scope.status() != cudaSuccess) fail_cuda(scope.status(), "cudaSetDevice (reserve_gather)", rank_, device_);
  free_staging();
  void* memory = nullptr;
  const cudaError_t status = cudaMalloc(&memory, static_cast<size_t>(floats) * sizeof(float));
  if (status != cudaSuccess) {
    fail("cudaMalloc of ", floats, " floats of gather staging failed on rank ", rank_, " (device ", device_,
         "): ", cudaGetErrorString(status));
  }
  staging_ = static_cast<float*>(memory);
  staging_floats_ = floats;
}

void NcclCollective::free_staging() {
  if (staging_ == nullptr) return;
  DeviceScope scope(device_);
  if (scope.status() != cudaSuccess) {
    fail_cuda(scope.status(), "cudaSetDevice (freeing gather staging)", rank_, device_);
  }
  const cudaError_t sync = cudaDeviceSynchronize();  // no gather in flight reads the old staging
  if (sync != cudaSuccess) fail_cuda(sync, "cudaDeviceSynchronize (freeing gather staging)", rank_, device_);
  if (staging_window_.nccl) {
    release_window(staging_window_);
  } else {
    cudaFree(staging_);
  }
  staging_window_ = Window{};
  staging_ = nullptr;
  staging_floats_ = 0;
}

// ---- windows ----

void* NcclCollective::cuda_window(int64_t bytes) {
  void* memory = nullptr;
  const cudaError_t status = cudaMalloc(&memory, static_cast<size_t>(bytes));
  if (status != cudaSuccess) {
    fail("cudaMalloc of ", bytes, " bytes (allocate_window, NCCL windows off) failed on rank ", rank_, " (device ",
         device_, "): ", cudaGetErrorString(status));
  }
  std::lock_guard lock(windows_mu_);
  windows_.push_back(Window{memory, bytes, nullptr, false});
  return memory;
}

void* NcclCollective::allocate_window(int64_t bytes) {
  if (bytes <= 0) fail("allocate_window on rank ", rank_, ": ", bytes, " bytes, expected > 0");
  ncclComm* comm = usable("allocate_window");
  if (!windows_enabled_.load()) {
    if (!windows_available()) note_no_windows(no_windows_reason());  // else said when they failed
    return cuda_window(bytes);
  }
#if defined(NCCL_WIN_COLL_SYMMETRIC)
  const size_t size = static_cast<size_t>(bytes);
  // The memory on every rank first: a rank whose ncclMemAlloc failed must not leave the others
  // waiting in the registration for it.
  void* memory = nullptr;
  const ncclResult_t allocated = ncclMemAlloc(&memory, size);
  const std::string alloc_error =
      allocated == ncclSuccess ? "" : std::string(ncclGetErrorString(allocated)) + " (" + ncclGetLastError(comm) + ")";
  const NcclGroup::Agreement memory_agreed = group_.agree(rank_, allocated == ncclSuccess, bytes, "allocate_window");
  const bool same_size = std::all_of(memory_agreed.values.begin(), memory_agreed.values.end(),
                                     [&](int64_t b) { return b == bytes; });
  if (!memory_agreed.all_ok || !same_size) {
    if (allocated == ncclSuccess) ncclMemFree(memory);
    if (allocated != ncclSuccess) {
      fail("ncclMemAlloc of ", bytes, " bytes (allocate_window) failed on rank ", rank_, " (device ", device_,
           "): ", alloc_error);
    }
    if (!memory_agreed.all_ok) {
      fail("allocate_window of ", bytes, " bytes on rank ", rank_, " (device ", device_,
           "): ncclMemAlloc failed on another rank of the group");
    }
    std::ostringstream sizes;
    for (size_t r = 0; r < memory_agreed.values.size(); ++r) {
      sizes << (r ? ", " : "") << "rank " << r << " " << memory_agreed.values[r];
    }
    fail("allocate_window on rank ", rank_, ": the ranks asked for windows of different sizes (", sizes.str(),
         " bytes); every rank allocates the same windows in the same order");
  }
  // Then the collective registration; its outcome agreed too, so every rank falls back alike.
  ncclWindow_t win = nullptr;
  const ncclResult_t registered = ncclCommWindowRegister(comm, memory, size, &win, NCCL_WIN_COLL_SYMMETRIC);
  const std::string register_error = registered == ncclSuccess
                                         ? ""
                                         : std::string(ncclGetErrorString(registered)) + " (" +
                                               ncclGetLastError(comm) + ")";
  bool all_registered = false;
  try {
    all_registered = group_.agree(rank_, registered == ncclSuccess, bytes, "allocate_window").all_ok;
  } catch (...) {
    if (registered == ncclSuccess) {  // freed with the group
      std::lock_guard lock(windows_mu_);
      windows_.push_back(Window{memory, bytes, win, true});
    } else {
      ncclMemFree(memory);
    }
    throw;
  }
  if (!all_registered) {
    if (registered == ncclSuccess && win != nullptr) ncclCommWindowDeregister(comm, win);
    ncclMemFree(memory);
    windows_enabled_.store(false);  // every rank, as every rank saw the same outcome
    if (registered != ncclSuccess) {
      std::ostringstream why;
      why << "ncclCommWindowRegister of " << bytes << " bytes failed on rank " << rank_ << " (device " << device_
          << "): " << register_error;
      note_no_windows(why.str());
    }
    return cuda_window(bytes);
  }
  if (win == nullptr) {
    // NCCL accepted the call and registered nothing: windows are off (NCCL_WIN_ENABLE=0, or the
    // GPUs lack CUDA peer access or cuMem). The memory serves all the same.
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      std::fprintf(stderr,
                   "kiln: NCCL registered no symmetric window (NCCL_WIN_ENABLE=0, or no peer access or cuMem "
                   "between the GPUs): tensor-parallel collectives run without NCCL's symmetric kernels\n");
    }
  }
  std::lock_guard lock(windows_mu_);
  windows_.push_back(Window{memory, bytes, win, true});
  return memory;
#else
  (void)comm;
  return cuda_window(bytes);
#endif
}

void NcclCollective::release_window(const Window& w) noexcept {
  if (w.ptr == nullptr) return;
  DeviceScope scope(device_);
  if (!w.nccl) {
    cudaFree(w.ptr);
    return;
  }
#if defined(NCCL_WIN_COLL_SYMMETRIC)
  // Not while an NCCL call may use it (NCCL's rule for deregistering); after an abort the
  // communicator is gone and its registrations with it (and a symmetric kernel of NCCL < 2.29.7
  // may still spin: no waiting for the device then).
  ncclComm* comm = comm_.load();
  if (comm != nullptr) {
    const cudaError_t sync = cudaDeviceSynchronize();
    if (sync != cudaSuccess) {
      std::fprintf(stderr, "kiln: cudaDeviceSynchronize before freeing a window failed on rank %d (device %d): %s\n",
                   rank_, device_, cudaGetErrorString(sync));
    }
    if (w.win != nullptr) {
      const ncclResult_t r = ncclCommWindowDeregister(comm, w.win);
      if (r != ncclSuccess) {
        std::fprintf(stderr, "kiln: ncclCommWindowDeregister failed on rank %d (device %d): %s (%s)\n", rank_,
                     device_, ncclGetErrorString(r), ncclGetLastError(comm));
      }
    }
  }
  const ncclResult_t r = ncclMemFree(w.ptr);
  if (r != ncclSuccess) {
    std::fprintf(stderr, "kiln: ncclMemFree failed on rank %d (device %d): %s\n", rank_, device_,
                 ncclGetErrorString(r));
  }
#endif
}

void NcclCollective::free_window(void* window) noexcept {
  if (window == nullptr) return;
  Window w;
  {
    std::lock_guard lock(windows_mu_);
    const auto it = std::find_if(windows_.begin(), windows_.end(), [&](const Window& x) { return x.ptr == window; });
    if (it == windows_.end()) {
      std::fprintf(stderr, "kiln: internal: free_window on rank %d: %p is not a window of this rank\n", rank_, window);
      return;
    }
    w = *it;
    windows_.erase(it);
  }
  release_window(w);
}

bool NcclCollective::is_window(const void* p) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  const auto inside = [&](const Window& w) {
    return w.nccl && w.win != nullptr && at >= reinterpret_cast<uintptr_t>(w.ptr) &&
           at < reinterpret_cast<uintptr_t>(w.ptr) + static_cast<uintptr_t>(w.bytes);
  };
  if (inside(staging_window_)) return true;
  std::lock_guard lock(windows_mu_);
  return std::any_of(windows_.begin(), windows_.end(), inside);
}

void NcclCollective::release() {
  DeviceScope scope(device_);
  std::vector<Window> windows;
  {
    std::lock_guard lock(windows_mu_);
    windows.swap(windows_);
  }
  for (auto w = windows.rbegin(); w != windows.rend(); ++w) release_window(*w);
  if (staging_window_.nccl) {
    release_window(staging_window_);
  } else if (staging_ != nullptr) {
    cudaFree(staging_);
  }
  staging_window_ = Window{};
  staging_ = nullptr;
  staging_floats_ = 0;
  if (ncclComm* comm = comm_.exchange(nullptr)) ncclCommDestroy(comm);
}

// ---- NcclGroup ---------------------------------------------------------------------------------

NcclGroup::NcclGroup(std::vector<int> devices) {
  if (devices.empty()) fail("NcclGroup: no devices, expected one per rank");
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) fail("NcclGroup: cudaGetDeviceCount failed: ", cudaGetErrorString(status));
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] < 0 || devices[i] >= count) {
      fail("NcclGroup: device ", devices[i], " of rank ", i, " does not exist (", count, " CUDA devices)");
    }
    if (std::find(devices.begin(), devices.begin() + i, devices[i]) != devices.begin() + i) {
      fail("NcclGroup: device ", devices[i], " named twice in [", devices_text(devices), "]: one GPU per rank");
    }
  }
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  const ncclResult_t r = ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data());
  if (r != ncclSuccess) {
    fail("ncclCommInitAll over devices [", devices_text(devices), "] failed: ", ncclGetErrorString(r), " (",
         ncclGetLastError(nullptr), ")");
  }
  const bool windows = windows_available();
  for (size_t i = 0; i < devices.size(); ++i) {
    ranks_.emplace_back(new NcclCollective(*this, static_cast<int32_t>(i), devices[i], comms[i], windows));
  }
  agree_posted_.assign(devices.size(), false);
  agree_values_.assign(devices.size(), 0);
  connect();
}

void NcclGroup::connect() {
  // NCCL connects the ranks (peer access, transport buffers) on a collective's first use of an
  // algorithm, and that cannot happen under graph capture ("operation not permitted when stream is
  // capturing"). So every collective runs here once over sizes from one float to 4 Mi floats (every
  // protocol NCCL may pick), all ranks from this thread in one NCCL group per size.
  constexpr int64_t kMax = int64_t{1} << 22;
  const int32_t n = size();
  std::vector<cudaStream_t> streams(n, nullptr);
  std::vector<float*> buffers(n, nullptr);  // [kMax] sent, then [kMax] gathered
  auto cleanup = [&] {
    for (int32_t r = 0; r < n; ++r) {
      DeviceScope scope(ranks_[r]->device_);
      if (streams[r] != nullptr) {
        cudaStreamSynchronize(streams[r]);
        cudaStreamDestroy(streams[r]);
      }
      if (buffers[r] != nullptr) cudaFree(buffers[r]);
    }
  };
  try {
    for (int32_t r = 0; r < n; ++r) {
      const int device = ranks_[r]->device_;
      DeviceScope scope(device);
      if (scope.status() != cudaSuccess) fail_cuda(scope.status(), "cudaSetDevice (connecting)", r, device);
      cudaError_t status = cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking);
      if (status != cudaSuccess) fail_cuda(status, "cudaStreamCreate (connecting)", r, device);
      status = cudaMalloc(&buffers[r], 2 * kMax * sizeof(float));
      if (status != cudaSuccess) fail_cuda(status, "cudaMalloc (connecting)", r, device);
      status = cudaMemsetAsync(buffers[r], 0, 2 * kMax * sizeof(float), streams[r]);
      if (status != cudaSuccess) fail_cuda(status, "cudaMemsetAsync (connecting)", r, device);
    }
    for (int64_t count = 1; count <= kMax; count *= 16) {
      for (const bool gather : {false, true}) {
        const size_t each = static_cast<size_t>(gather ? std::max<int64_t>(1, count / n) : count);
        ncclResult_t result = ncclGroupStart();
        for (int32_t r = 0; r < n && result == ncclSuccess; ++r) {
          ncclComm* comm = ranks_[r]->comm_.load();
          result = gather ? ncclAllGather(buffers[r], buffers[r] + kMax, each, ncclFloat, comm, streams[r])
                          : ncclAllReduce(buffers[r], buffers[r], each, ncclFloat, ncclSum, comm, streams[r]);
        }
        const ncclResult_t end = ncclGroupEnd();
        if (result == ncclSuccess) result = end;
        if (result != ncclSuccess) {
          fail(gather ? "ncclAllGather" : "ncclAllReduce", " of ", each, " floats while connecting the ranks of devices [",
               devices_text(devices()), "] failed: ", ncclGetErrorString(result), " (", ncclGetLastError(nullptr), ")");
        }
      }
    }
    for (int32_t r = 0; r < n; ++r) {
      DeviceScope scope(ranks_[r]->device_);
      const cudaError_t status = cudaStreamSynchronize(streams[r]);
      if (status != cudaSuccess) fail_cuda(status, "cudaStreamSynchronize (connecting)", r, ranks_[r]->device_);
    }
  } catch (...) {
    cleanup();
    for (auto& rank : ranks_) rank->release();
    throw;
  }
  cleanup();
}

std::vector<int> NcclGroup::devices() const {
  std::vector<int> devices;
  for (const auto& rank : ranks_) devices.push_back(rank->device_);
  return devices;
}

NcclGroup::~NcclGroup() {
  for (auto& rank : ranks_) rank->release();
}

NcclCollective& NcclGroup::rank(int32_t r) {
  if (r < 0 || r >= size()) fail("NcclGroup::rank(", r, "): the group has ranks 0..", size() - 1);
  return *ranks_[r];
}

void NcclGroup::reserve_gather(int64_t floats) {
  bool grow = false;
  for (auto& rank : ranks_) grow = grow || floats > rank->staging_floats_;
  if (!grow) return;
  if (aborted_.load()) ranks_[0]->fail_aborted("reserve_gather");
  if (!ranks_[0]->windows_enabled_.load()) {
    if (!windows_available()) note_no_windows(no_windows_reason());
    for (auto& rank : ranks_) rank->reserve_gather(floats);
    return;
  }
#if defined(NCCL_WIN_COLL_SYMMETRIC)
  for (auto& rank : ranks_) {
    if (rank->gather_captured_) {
      fail("reserve_gather(", floats, ") on rank ", rank->rank_, ": ", rank->staging_floats_,
           " floats are reserved and a captured graph gathers through them; reserve the largest gather before "
           "capturing");
    }
  }
  for (auto& rank : ranks_) rank->free_staging();
  // Every rank's memory, then the registrations in one NCCL group from this thread (NCCL registers
  // each communicator's on a thread of its own).
  const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
  const int32_t n = size();
  std::vector<void*> memory(n, nullptr);
  std::vector<ncclWindow_t> wins(n, nullptr);
  const auto free_memory = [&] {
    for (int32_t r = 0; r < n; ++r) {
      if (memory[r] != nullptr) ncclMemFree(memory[r]);
      memory[r] = nullptr;
    }
  };
  for (int32_t r = 0; r < n; ++r) {
    NcclCollective& rank = *ranks_[r];
    DeviceScope scope(rank.device_);
    if (scope.status() != cudaSuccess) fail_cuda(scope.status(), "cudaSetDevice (reserve_gather)", r, rank.device_);
    const ncclResult_t result = ncclMemAlloc(&memory[r], bytes);
    if (result != ncclSuccess) {
      memory[r] = nullptr;
      const std::string detail = std::string(ncclGetErrorString(result)) + " (" + ncclGetLastError(nullptr) + ")";
      free_memory();
      fail("ncclMemAlloc of ", floats, " floats of gather staging failed on rank ", r, " (device ", rank.device_,
           "): ", detail);
    }
  }
  ncclResult_t result = ncclGroupStart();
  int32_t failed = -1;
  for (int32_t r = 0; r < n && result == ncclSuccess; ++r) {
    result = ncclCommWindowRegister(ranks_[r]->comm_.load(), memory[r], bytes, &wins[r], NCCL_WIN_COLL_SYMMETRIC);
    if (result != ncclSuccess) failed = r;
  }
  const ncclResult_t end = ncclGroupEnd();
  if (result == ncclSuccess) result = end;
  if (result != ncclSuccess) {
    std::ostringstream why;
    why << "ncclCommWindowRegister of " << floats << " floats of gather staging failed";
    if (failed >= 0) why << " on rank " << failed;
    why << ": " << ncclGetErrorString(result) << " (" << ncclGetLastError(nullptr) << ")";
    for (int32_t r = 0; r < n; ++r) {
      DeviceScope scope(ranks_[r]->device_);
      if (wins[r] != nullptr) ncclCommWindowDeregister(ranks_[r]->comm_.load(), wins[r]);
    }
    free_memory();
    for (auto& rank : ranks_) rank->windows_enabled_.store(false);
    note_no_windows(why.str());
    for (auto& rank : ranks_) rank->reserve_gather(floats);
    return;
  }
  for (int32_t r = 0; r < n; ++r) {
    NcclCollective& rank = *ranks_[r];
    rank.staging_window_ = NcclCollective::Window{memory[r], static_cast<int64_t>(bytes), wins[r], true};
    rank.staging_ = static_cast<float*>(memory[r]);
    rank.staging_floats_ = floats;
  }
#else
  for (auto& rank : ranks_) rank->reserve_gather(floats);
#endif
}

NcclGroup::Agreement NcclGroup::agree(int32_t rank, bool ok, int64_t value, const char* what) {
  constexpr auto kAgreeTimeout = std::chrono::seconds(120);
  std::unique_lock lock(agree_mu_);
  if (aborted_.load()) ranks_[rank]->fail_aborted(what);
  if (agree_posted_[rank]) {
    fail("internal: ", what, " on rank ", rank, ": posted twice in one round (every rank calls it once, from its own "
         "thread)");
  }
  const int64_t round = agree_round_;
  agree_posted_[rank] = true;
  agree_all_ = agree_all_ && ok;
  agree_values_[rank] = value;
  if (++agree_arrived_ == size()) {
    agree_result_ = Agreement{agree_all_, agree_values_};
    agree_all_ = true;
    agree_arrived_ = 0;
    std::fill(agree_posted_.begin(), agree_posted_.end(), false);
    ++agree_round_;
    agree_cv_.notify_all();
    return agree_result_;
  }
  const auto done = [&] { return agree_round_ != round || aborted_.load(); };
  if (ok) {
    agree_cv_.wait(lock, done);
  } else if (!agree_cv_.wait_for(lock, kAgreeTimeout, done)) {
    // The others did not come: some are inside NCCL's collective call waiting for this rank.
    // Aborting the communicators makes them return.
    lock.unlock();
    std::ostringstream why;
    why << what << " failed on rank " << rank << " and the other ranks did not return from NCCL within "
        << kAgreeTimeout.count() << " s";
    abort(why.str());
    ranks_[rank]->fail_aborted(what);
  }
  if (agree_round_ == round) ranks_[rank]->fail_aborted(what);  // aborted
  return agree_result_;
}

void NcclGroup::abort(const std::string& why) {
  std::lock_guard lock(abort_mu_);
  if (aborted_.load()) return;
  why_ = why.empty() ? "(no reason given)" : why;  // written once, before aborted_ is seen set
  aborted_.store(true);
  {
    std::lock_guard agree_lock(agree_mu_);  // ranks waiting in agree see aborted_
    agree_cv_.notify_all();
  }
  // Every communicator, so ranks blocked in NCCL return; their communicators are freed with it.
  for (auto& rank : ranks_) {
    if (ncclComm* comm = rank->comm_.exchange(nullptr)) {
      DeviceScope scope(rank->device_);
      ncclCommAbort(comm);
    }
  }
}

}  // namespace kiln
