// The memory read bandwidth of T threads, the floor of a memory-bound CPU decode (bench/RESULTS.md):
// each thread sums its own 1 GiB buffer (written first, so its pages exist), best of 4 passes.
//   g++ -O3 -march=native -pthread tools/bench/read_bandwidth.cpp -o /tmp/read_bandwidth && /tmp/read_bandwidth 2
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 1;
  const size_t words = (size_t{1} << 30) / sizeof(uint64_t);
  std::vector<std::vector<uint64_t>> buffers(threads, std::vector<uint64_t>(words, 1));
  std::vector<uint64_t> sums(threads);
  double best = 0.0;
  for (int pass = 0; pass < 4; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        uint64_t s = 0;
        for (const uint64_t v : buffers[t]) s += v;
        sums[t] = s;
      });
    }
    for (std::thread& th : pool) th.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(threads) * words * sizeof(uint64_t) / seconds / 1e9);
  }
  uint64_t all = 0;
  for (const uint64_t s : sums) all += s;
  std::printf("%d threads: %.1f GB/s read (best of 4 passes; checksum %llu)\n", threads, best, static_cast<unsigned long long>(all));
}
