// CpuCollectiveGroup — the ranks of a tensor-parallel group as threads of one process (the CPU
// reference backend: CI checks tensor parallelism without GPUs). rank(r) is the Collective that
// rank r's thread calls; every rank's thread makes the same calls in the same order.
//
// Results do not depend on thread timing: all_reduce sums the partials in rank order
// (((p0 + p1) + p2) + …), then stores that sum into each rank's `out` (add: out + sum), so every
// rank ends with the same bits on every run. Each call is two barriers: the ranks post their calls
// (the last to arrive checks that they match and sizes the group's staging buffer), then each rank
// reduces its slice of [0, count) (or copies its shard) into staging, then every rank reads staging
// into its own `out`. Buffers may alias across ranks and `shard` may be the start of `out`: all
// reads of the inputs end at the second barrier, and only then is any `out` written.
//
// Calls that do not match across ranks (another kind of call, another count, rows, cols or add)
// abort the group with a message listing every rank's call; abort(why) wakes every waiting rank.
// After an abort every pending and later call throws kiln::Error naming why; the group stays
// aborted.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/parallel/collective.hpp"

namespace kiln {

class CpuCollectiveGroup {
 public:
  explicit CpuCollectiveGroup(int32_t size);
  ~CpuCollectiveGroup();
  CpuCollectiveGroup(const CpuCollectiveGroup&) = delete;
  CpuCollectiveGroup& operator=(const CpuCollectiveGroup&) = delete;

  int32_t size() const { return size_; }
  Collective& rank(int32_t r);
  // The same as any rank's abort(why).
  void abort(const std::string& why);

 private:
  class Rank;
  enum class Kind { kNone, kAllReduce, kAllGatherColumns };
  struct Call {  // what one rank posted for the current call
    Kind kind = Kind::kNone;
    const float* in = nullptr;  // partial or shard
    float* out = nullptr;
    int64_t count = 0, rows = 0, cols = 0;
    bool add = false;
  };

  void all_reduce(int32_t r, const float* partial, float* out, int64_t count, bool add);
  void all_gather_columns(int32_t r, const float* shard, float* out, int64_t rows, int64_t cols);
  // Posts rank r's call and waits for every rank's; the last to arrive checks them and sizes staging.
  void post(int32_t r, const Call& call);
  // Waits for every rank to finish writing staging.
  void wait_all(int32_t r, const char* what);
  // Under mu_: every arrival of this generation is in; starts the next one and wakes the waiters.
  void advance_locked();
  // Under mu_: checks the posted calls match; empty when they do, else the message.
  std::string mismatch_locked() const;
  void abort_locked(const std::string& why);
  [[noreturn]] void throw_aborted_locked(int32_t r, const char* what) const;

  const int32_t size_;
  std::vector<std::unique_ptr<Rank>> ranks_;

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;  // counts completed barriers
  int32_t arrived_ = 0;
  std::vector<char> arrived_rank_;  // per rank: arrived at the current barrier
  std::vector<Call> calls_;
  bool aborted_ = false;
  std::string why_;
  // [count] sums (all_reduce) or [size][rows][cols] shards (all_gather_columns). Resized only by the
  // last rank to post a call, while every other rank waits in post().
  std::vector<float> staging_;
};

}  // namespace kiln
