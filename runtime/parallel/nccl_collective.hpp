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
// With rows 1 and the shard at one of out's column blocks (the forward's logits: at its start),
// every rank gathers in place — the shard copied to this rank's block first when it is elsewhere —
// so that every rank's call has the same form (see windows below).
//
// Windows (NCCL 2.27+ symmetric memory): allocate_window(bytes) is ncclMemAlloc on the rank's
// device registered with ncclCommWindowRegister(…, NCCL_WIN_COLL_SYMMETRIC). A collective call:
// every rank calls it with the same bytes in the same order, each from its own thread (NCCL's
// registration waits for every rank's). A collective whose send and receive buffers both lie in
// such windows, at the same offsets on every rank, runs NCCL's symmetric kernels (fp32 sum
// all-reduce and all-gather over NVLink load/store, no multicast: nothing here asks for NVLS).
// NCCL requires that either every rank's buffers of a call are registered or none are, so the
// windows' users (the backend: the arena the residual stream is in, the logits) allocate the same
// buffers on every rank; NcclGroup::reserve_gather makes the staging a window too. The ranks
// agree on each step of allocate_window (the memory, then the registration) before going on, so
// a failure on one rank leaves no rank inside NCCL's collective registration: a failed ncclMemAlloc
// fails every rank's call; a failed registration (or an NCCL older than 2.27 at run time) makes
// every rank fall back to cudaMalloc for this and every later window, said once on stderr.
// NCCL_WIN_ENABLE=0 turns NCCL's windows off (the memory stays, its kernels are the usual ones).
// free_window deregisters and frees one; the group frees the rest before destroying the
// communicators. Before NCCL 2.29.7 the symmetric kernels do not watch NCCL's abort flag: a rank
// stuck in one waiting for a failed rank does not return on abort (the ordinary kernels do).
//
// abort(why) calls ncclCommAbort on every communicator, so kernels waiting for a failed rank stop
// and the streams they hold return; every later call throws kiln::Error naming why. (The
// communicators are blocking ones, as ncclCommInitAll makes them: a call racing with abort on
// another thread is as safe as NCCL makes ncclCommAbort.) Errors name the call, the
// rank and NCCL's or CUDA's message. Nothing here sets NCCL's environment (NCCL_NVLS_ENABLE …).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/parallel/collective.hpp"

struct ncclComm;           // nccl.h: typedef struct ncclComm* ncclComm_t
struct ncclWindow_vidmem;  // nccl.h (2.27+): typedef struct ncclWindow_vidmem* ncclWindow_t

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

  // A window of `bytes` on this rank's device (see the top of this file); called on the rank's own
  // thread with its device current, every rank alike. Fails (every rank) when ncclMemAlloc fails.
  void* allocate_window(int64_t bytes) override;
  void free_window(void* window) noexcept override;
  // Whether `p` lies in an NCCL window of this rank (false: not a window, or cudaMalloc memory
  // allocate_window fell back to).
  bool is_window(const void* p) const;
  // Whether allocate_window still gives NCCL windows (false once it fell back to cudaMalloc).
  bool windows_enabled() const { return windows_enabled_.load(); }

  // Staging for all_gather_columns of up to `floats` gathered floats (rows × size() × cols). Call
  // before capturing a graph; grows only (cudaMalloc on this rank's device), never after a gather
  // was captured. This rank's alone, so not a window: NcclGroup::reserve_gather reserves every
  // rank's as windows (ranks must reserve alike: NCCL's registered and unregistered buffers do not
  // mix in one call).
  void reserve_gather(int64_t floats);
  int64_t gather_reserved() const { return staging_floats_; }

 private:
  friend class NcclGroup;
  // Memory allocate_window gave: an NCCL window (ncclMemAlloc, `win` from the registration, null
  // where NCCL registered none) or cudaMalloc memory (nccl false).
  struct Window {
    void* ptr = nullptr;
    int64_t bytes = 0;
    ncclWindow_vidmem* win = nullptr;
    bool nccl = false;
  };
  NcclCollective(NcclGroup& group, int32_t rank, int device, ncclComm* comm, bool windows);
  void release();  // frees the windows and staging, destroys the communicator (not aborted)
  void release_window(const Window& w) noexcept;  // deregisters (not aborted) and frees
  void free_staging();                             // after the device is idle; staging may be a window
  void* cuda_window(int64_t bytes);                // allocate_window's fallback
  // The communicator, after checking the group is not aborted, the buffers and the current device.
  ncclComm* usable(const char* what) const;
  [[noreturn]] void fail_aborted(const char* what) const;

  NcclGroup& group_;
  const int32_t rank_;
  const int device_;
  std::atomic<ncclComm*> comm_;  // null once aborted or destroyed
  std::atomic<bool> windows_enabled_;
  mutable std::mutex windows_mu_;  // guards windows_
  std::vector<Window> windows_;    // allocation order
  float* staging_ = nullptr;
  int64_t staging_floats_ = 0;
  Window staging_window_;  // staging_ when NcclGroup::reserve_gather made it a window (nccl true)
  bool gather_captured_ = false;
};

// The NCCL library's version at run time (ncclGetVersion: 22809 for 2.28.9), 0 if it fails.
int nccl_runtime_version();

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
  // Every rank's gather staging (as NcclCollective::reserve_gather), from this one thread: NCCL
  // windows registered in one NCCL group, or cudaMalloc where windows are off or fail (said once).
  void reserve_gather(int64_t floats);
  // The same as any rank's abort(why).
  void abort(const std::string& why);
  bool aborted() const { return aborted_.load(); }

 private:
  friend class NcclCollective;
  void connect();
  // One step of a call every rank makes on its own thread (allocate_window): rank `rank` posts
  // whether its part succeeded and a value (the size asked for), and waits for every rank's;
  // returns whether all succeeded and every rank's value. A rank that failed waits at most
  // 120 s for the others (one may be inside NCCL's collective registration, waiting for
  // it), then aborts the group. Throws once the group is aborted.
  struct Agreement {
    bool all_ok = true;
    std::vector<int64_t> values;  // [rank]
  };
  Agreement agree(int32_t rank, bool ok, int64_t value, const char* what);
  std::vector<std::unique_ptr<NcclCollective>> ranks_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mu_;  // guards why_ and the aborting itself
  std::string why_;
  std::mutex agree_mu_;  // guards the agree_ fields
  std::condition_variable agree_cv_;
  int64_t agree_round_ = 0;            // rounds completed
  int32_t agree_arrived_ = 0;          // ranks posted in the current round
  bool agree_all_ = true;              // every rank so far posted ok (current round)
  std::vector<int64_t> agree_values_;  // [rank] (current round)
  std::vector<bool> agree_posted_;     // [rank]: posted in the current round
  Agreement agree_result_;             // the last completed round's
};

}  // namespace kiln
