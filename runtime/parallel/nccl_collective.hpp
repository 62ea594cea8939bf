// NcclGroup — the ranks of a tensor-parallel group as GPUs of one process, one GPU per rank, with
// NCCL communicators made by ncclCommInitAll over `devices` (rank r on devices[r]). rank(r) is the
// Collective that rank r's host thread calls; since NCCL needs every rank's call of a collective
// before any completes, each rank's calls come from its own thread (or, with one rank, the one).
// Calls are enqueued on the stream passed in (a cudaStream_t of the rank's device, which must be the
// calling thread's current device) and may be captured in a CUDA graph: the constructor has already
// run every collective once, so NCCL's lazy connection setup never happens under capture.
//
// all_reduce: ncclAllReduce (float, sum), partial → out for a store; for add, in place into
// partial, then out += partial (a small kernel on the same stream).
// all_gather_columns: rows == 1 and a shard outside out: ncclAllGather straight into out. Otherwise
// ncclAllGather into the rank's staging buffer [size][rows][cols], then one cudaMemcpy2DAsync per
// rank into out's columns. Staging is allocated by reserve_gather, never inside a call (a call may
// be under graph capture): a call that needs more than was reserved fails. Growing staging after a
// gather was captured would free memory a graph uses, and fails too.
//
// abort(why) calls ncclCommAbort on every communicator, so kernels waiting for a failed rank stop
// and the streams they hold return; every later call throws kiln::Error naming why. (The
// communicators are blocking ones, as ncclCommInitAll makes them: a call racing with abort on
// another thread is as safe as NCCL makes ncclCommAbort.) Errors name the call, the
// rank and NCCL's or CUDA's message. Nothing here sets NCCL's environment (NCCL_NVLS_ENABLE …).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/parallel/collective.hpp"

struct ncclComm;  // nccl.h: typedef struct ncclComm* ncclComm_t

namespace kiln {

class NcclGroup;

class NcclCollective final : public Collective {
 public:
  int32_t rank() const override { return rank_; }
  int32_t size() const override;
  int device() const { return device_; }
  void all_reduce(float* partial, float* out, int64_t count, bool add, void* stream) override;
  void all_gather_columns(const float* shard, float* out, int64_t rows, int64_t cols, void* stream) override;
  void abort(const std::string& why) override;

  // Staging for all_gather_columns of up to `floats` gathered floats (rows × size() × cols). Call
  // before capturing a graph; grows only (cudaMalloc on this rank's device), never after a gather
  // was captured.
  void reserve_gather(int64_t floats);
  int64_t gather_reserved() const { return staging_floats_; }

 private:
  friend class NcclGroup;
  NcclCollective(NcclGroup& group, int32_t rank, int device, ncclComm* comm);
  void release();  // frees staging and destroys the communicator (not aborted)
  // The communicator, after checking the group is not aborted, the buffers and the current device.
  ncclComm* usable(const char* what) const;
  [[noreturn]] void fail_aborted(const char* what) const;

  NcclGroup& group_;
  const int32_t rank_;
  const int device_;
  std::atomic<ncclComm*> comm_;  // null once aborted or destroyed
  float* staging_ = nullptr;
  int64_t staging_floats_ = 0;
  bool gather_captured_ = false;
};

class NcclGroup {
 public:
  // One communicator per device, rank r on devices[r] (devices distinct), then every collective
  // once over a range of sizes so that NCCL has connected the ranks before any call is captured in
  // a graph (NCCL connects lazily, which capture forbids). Fails naming NCCL's or CUDA's error.
  explicit NcclGroup(std::vector<int> devices);
  ~NcclGroup();  // destroys the communicators (or, after abort, only frees the staging)
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int32_t size() const { return static_cast<int32_t>(ranks_.size()); }
  std::vector<int> devices() const;
  NcclCollective& rank(int32_t r);
  // reserve_gather on every rank.
  void reserve_gather(int64_t floats);
  // The same as any rank's abort(why).
  void abort(const std::string& why);
  bool aborted() const { return aborted_.load(); }

 private:
  friend class NcclCollective;
  void connect();
  std::vector<std::unique_ptr<NcclCollective>> ranks_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mu_;  // guards why_ and the aborting itself
  std::string why_;
};

}  // namespace kiln
