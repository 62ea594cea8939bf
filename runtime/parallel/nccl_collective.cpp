#include "runtime/parallel/nccl_collective.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "runtime/core/error.hpp"

namespace kiln {

// nccl_collective_kernels.cu: out[i] += in[i] for i < count, on `stream`; that launch's own error.
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

}  // namespace

// ---- NcclCollective ----------------------------------------------------------------------------

NcclCollective::NcclCollective(NcclGroup& group, int32_t rank, int device, ncclComm* comm)
    : group_(group), rank_(rank), device_(device), comm_(comm) {}

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

  // One row whose shard is outside out (or already at its place in out: NCCL's in-place form):
  // out is [size][cols], exactly what ncclAllGather writes.
  const auto at = [](const float* p) { return reinterpret_cast<uintptr_t>(p); };
  const bool in_place = shard == out + rank_ * cols;
  const bool apart = at(shard + cols) <= at(out) || at(shard) >= at(out + need);
  if (rows == 1 && (in_place || apart)) {
    const ncclResult_t r = ncclAllGather(shard, out, static_cast<size_t>(cols), ncclFloat, comm, s);
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
  if (staging_ != nullptr) {
    const cudaError_t sync = cudaDeviceSynchronize();  // no gather in flight reads the old staging
    if (sync != cudaSuccess) fail_cuda(sync, "cudaDeviceSynchronize (reserve_gather)", rank_, device_);
    cudaFree(staging_);
    staging_ = nullptr;
    staging_floats_ = 0;
  }
  void* memory = nullptr;
  const cudaError_t status = cudaMalloc(&memory, static_cast<size_t>(floats) * sizeof(float));
  if (status != cudaSuccess) {
    fail("cudaMalloc of ", floats, " floats of gather staging failed on rank ", rank_, " (device ", device_,
         "): ", cudaGetErrorString(status));
  }
  staging_ = static_cast<float*>(memory);
  staging_floats_ = floats;
}

void NcclCollective::release() {
  DeviceScope scope(device_);
  if (staging_ != nullptr) cudaFree(staging_);
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
  for (size_t i = 0; i < devices.size(); ++i) {
    ranks_.emplace_back(new NcclCollective(*this, static_cast<int32_t>(i), devices[i], comms[i]));
  }
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
  for (auto& rank : ranks_) rank->reserve_gather(floats);
}

void NcclGroup::abort(const std::string& why) {
  std::lock_guard lock(abort_mu_);
  if (aborted_.load()) return;
  why_ = why.empty() ? "(no reason given)" : why;  // written once, before aborted_ is seen set
  aborted_.store(true);
  // Every communicator, so ranks blocked in NCCL return; their communicators are freed with it.
  for (auto& rank : ranks_) {
    if (ncclComm* comm = rank->comm_.exchange(nullptr)) {
      DeviceScope scope(rank->device_);
      ncclCommAbort(comm);
    }
  }
}

}  // namespace kiln
