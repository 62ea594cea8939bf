#include "runtime/core/parallel.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln {

namespace {

class Pool {
 public:
  Pool() {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const unsigned workers = std::min(cores, 16u) - 1;  // the caller works too
    for (unsigned i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  size_t size() const { return threads_.size() + 1; }

  // One caller at a time: a second caller (another rank thread of the CPU reference, say) waits
  // for the first one's whole run. Callers inside a pool task never get here (they run inline), so
  // a caller holding turn_ never waits for turn_.
  void run(int64_t chunks, const std::function<void(int64_t)>& task) {
    std::lock_guard turn(turn_);
    std::unique_lock lock(mu_);
    task_ = &task;
    next_ = 0;
    chunks_ = chunks;
    pending_ = chunks;
    ++generation_;
    wake_.notify_all();
    lock.unlock();
    drain();
    lock.lock();
    done_.wait(lock, [&] { return pending_ == 0; });
    task_ = nullptr;
  }

 private:
  void drain() {
    for (;;) {
      int64_t chunk;
      const std::function<void(int64_t)>* task;
      {
        std::lock_guard lock(mu_);
        if (task_ == nullptr || next_ >= chunks_) break;
        chunk = next_++;
        task = task_;
      }
      (*task)(chunk);
      std::lock_guard lock(mu_);
      if (--pending_ == 0) done_.notify_all();
    }
  }
  void work() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      drain();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex turn_;  // held by the caller for its whole run()
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t next_ = 0, chunks_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

thread_local bool t_inside_parallel_for = false;

}  // namespace

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
  static Pool pool;
  if (n <= 0) return;
  if (n < 2 * grain || pool.size() == 1 || t_inside_parallel_for) {
    body(0, n);
    return;
  }
  const int64_t chunks = std::min<int64_t>(static_cast<int64_t>(pool.size()) * 4, (n + grain - 1) / grain);
  const int64_t per = (n + chunks - 1) / chunks;
  pool.run(chunks, [&](int64_t c) {
    t_inside_parallel_for = true;
    const int64_t begin = c * per, end = std::min(n, begin + per);
    if (begin < end) body(begin, end);
    t_inside_parallel_for = false;
  });
}

}  // namespace kiln
