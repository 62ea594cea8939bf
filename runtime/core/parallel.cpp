#include "runtime/core/parallel.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace kiln {

namespace {

void pause_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// The CPUs this process may run on, one per physical core (the first hyper-thread of each).
std::vector<int> core_cpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return {};
  std::vector<int> cpus;
  std::set<std::string> seen;  // thread_siblings_list of each core taken
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list");
    std::string siblings;
    if (!(f >> siblings)) siblings = std::to_string(cpu);  // no topology: every CPU a core
    if (seen.insert(siblings).second) cpus.push_back(cpu);
  }
  return cpus;
}

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort: a refusal leaves it unpinned
}

// Workers wait for work spinning first, then asleep: a decode step calls parallel_for a few hundred
// times with a little serial work between, and a condition variable's wake-up (tens of µs) would
// cost more than the work. The caller spins for the last chunks likewise.
class Pool {
 public:
  // With `pin`, worker i runs on core i only; the caller keeps its own affinity (threads it starts
  // later, an HTTP server's say, inherit it), so core 0 is left to it by the workers.
  Pool(int32_t threads, bool pin) {
    const std::vector<int> cpus = pin ? core_cpus() : std::vector<int>{};
    for (int32_t i = 1; i < threads; ++i) {
      const int cpu = cpus.empty() ? -1 : cpus[static_cast<size_t>(i) % cpus.size()];
      threads_.emplace_back([this, cpu] {
        if (cpu >= 0) pin_to(cpu);
        work();
      });
    }
  }
  ~Pool() {
    {
      std::lock_guard lock(mu_);
      stop_.store(true, std::memory_order_release);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  int32_t size() const { return static_cast<int32_t>(threads_.size()) + 1; }
  static constexpr int64_t kMaxChunks = 0xFFFF;  // a run's chunk count fits claim_'s 16 bits

  // Runs task(0..chunks - 1), chunks <= kMaxChunks. One caller at a time: a second caller
  // (another rank thread of the CPU reference, say) waits for the first one's whole run. Callers
  // inside a pool task never get here (they run inline), so a caller holding turn_ never waits
  // for turn_.
  void run(int64_t chunks, const std::function<void(int64_t)>& task) {
    std::lock_guard turn(turn_);
    task_.store(&task, std::memory_order_relaxed);
    pending_.store(chunks, std::memory_order_relaxed);
    const uint64_t run = ++runs_ & 0xFFFFFFFFu;
    // Publishes task_ and pending_ with the run.
    claim_.store(run << 32 | static_cast<uint64_t>(chunks) << 16, std::memory_order_release);
    // The new generation, then the sleepers; a worker counts itself a sleeper, then reads the
    // generation (seq_cst both sides): either it sees this run, or this sees it and wakes it.
    generation_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard lock(mu_);
      wake_.notify_all();
    }
    drain();
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
      if (spins < (1 << 16)) {
        pause_cpu();
      } else {
        std::this_thread::yield();  // a worker descheduled mid-chunk (more threads than cores)
      }
    }
  }

 private:
  // Claims and runs chunks of the run claim_ names until none is left. claim_ holds the run's
  // number, its chunk count and the next chunk, so a claim is one compare-and-swap and its check
  // reads the count of the same run: a worker that arrives late, when its run is over and the
  // next is being published, cannot take a chunk past the old run's end (one of the new run's,
  // with the new task, which its owner would then run again), and runs only chunks of the run it
  // read, with that run's task (stored before the run's claim_). It replaced a mutex taken per
  // chunk: two threads contending for it on every chunk of ~180 runs a decode step.
  void drain() {
    uint64_t claim = claim_.load(std::memory_order_acquire);
    for (;;) {
      const int64_t chunk = static_cast<int64_t>(claim & 0xFFFFu);
      if (chunk >= static_cast<int64_t>((claim >> 16) & 0xFFFFu)) return;
      if (!claim_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        continue;  // another thread took it (or a new run began): `claim` holds the current value
      }
      (*task_.load(std::memory_order_relaxed))(chunk);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
      claim = claim_.load(std::memory_order_acquire);
    }
  }

  void work() {
    uint64_t seen = 0;
    for (;;) {
      const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
      for (int i = 0; generation_.load(std::memory_order_acquire) == seen; ++i) {
        pause_cpu();
        if ((i & 255) == 0 && std::chrono::steady_clock::now() > spin_until) {
          std::unique_lock lock(mu_);
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          wake_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
          sleepers_.fetch_sub(1, std::memory_order_acq_rel);
          break;
        }
      }
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_acquire)) return;
      drain();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex turn_;  // held by the caller for its whole run()
  std::mutex mu_;    // a worker's sleep and its wake-up
  std::condition_variable wake_;
  std::atomic<const std::function<void(int64_t)>*> task_{nullptr};
  std::atomic<uint64_t> claim_{0};  // run number << 32 | chunks << 16 | next chunk
  uint64_t runs_ = 0;               // the caller's (under turn_)
  std::atomic<int32_t> sleepers_{0};
  std::atomic<int64_t> pending_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
};

thread_local bool t_inside_parallel_for = false;

std::mutex g_pool_mu;
std::shared_ptr<Pool> g_pool;  // replaced by set_parallel_threads; a run in flight keeps its own

int32_t default_threads() { return std::min(physical_cores(), 16); }

std::shared_ptr<Pool> pool() {
  std::lock_guard lock(g_pool_mu);
  if (!g_pool) g_pool = std::make_shared<Pool>(default_threads(), false);
  return g_pool;
}

}  // namespace

int32_t physical_cores() {
  static const int32_t cores = [] {
    const size_t n = core_cpus().size();
    return static_cast<int32_t>(n > 0 ? n : std::max(1u, std::thread::hardware_concurrency()));
  }();
  return cores;
}

void set_parallel_threads(int32_t threads, bool pin) {
  const int32_t n = std::clamp(threads > 0 ? threads : physical_cores(), 1, 64);
  std::shared_ptr<Pool> next = std::make_shared<Pool>(n, pin);
  std::lock_guard lock(g_pool_mu);
  g_pool = std::move(next);
}

int32_t parallel_threads() { return pool()->size(); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  const std::shared_ptr<Pool> p = t_inside_parallel_for ? nullptr : pool();
  if (p == nullptr || n < 2 * grain || p->size() == 1) {
    body(0, n);
    return;
  }
  const int64_t chunks =
      std::min({static_cast<int64_t>(p->size()) * 4, (n + grain - 1) / grain, Pool::kMaxChunks});
  const int64_t per = (n + chunks - 1) / chunks;
  p->run(chunks, [&](int64_t c) {
    t_inside_parallel_for = true;
    const int64_t begin = c * per, end = std::min(n, begin + per);
    if (begin < end) body(begin, end);
    t_inside_parallel_for = false;
  });
}

}  // namespace kiln
