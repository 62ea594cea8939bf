// RankThreads — where a tensor-parallel group's per-rank work runs: rank 0 on the calling thread,
// every other rank on a thread of its own that lives as long as the group. Rank r's work always
// runs on the same thread, so its NCCL calls come from one thread, and the ranks' calls of a
// collective are made concurrently, as NCCL and the CPU collectives need.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kiln {

class RankThreads {
 public:
  // `on_error(message)` is called as soon as a rank's task throws, before the other ranks finish:
  // it aborts the group's collectives, so ranks waiting for the failed one return.
  RankThreads(int32_t ranks, std::function<void(const std::string&)> on_error);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int32_t size() const { return static_cast<int32_t>(workers_.size()) + 1; }

  // Runs task(r) for every rank, rank 0 on this thread, and returns when all have. If any threw,
  // rethrows the first failure as kiln::Error prefixed with its rank.
  void run_all(const std::function<void(int32_t)>& task);

 private:
  void work(int32_t rank);
  // Records a rank's failure (the first one is kept) and reports it to on_error_.
  void failed(int32_t rank, std::exception_ptr error);

  std::function<void(const std::string&)> on_error_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int32_t)>* task_ = nullptr;
  uint64_t generation_ = 0;
  int32_t pending_ = 0;
  bool stop_ = false;
  std::string first_error_;
  std::vector<std::thread> workers_;  // ranks 1..size-1
};

}  // namespace kiln
