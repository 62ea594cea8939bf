// CpuCollectiveGroup (simulated ranks as threads) and parallel_for under several callers at once.
//
// all_reduce must give every rank the rank-order sum ((p0 + p1) + p2) + … bit for bit, whatever the
// thread timing: the partials have magnitudes over six decades, so another order rounds differently.
// Outputs a call must overwrite are poisoned with NaN. Every multi-thread case runs under a
// watchdog that fails the program instead of letting ctest hang.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/parallel.hpp"
#include "runtime/parallel/cpu_collective.hpp"

using namespace kiln;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Runs body(r) on one thread per rank and returns each rank's exception message ("" if none).
// A run longer than 60 s is a hang: the program stops with a message.
std::vector<std::string> run_ranks(int32_t n, const std::function<void(int32_t)>& body) {
  std::vector<std::string> errors(n);
  std::mutex mu;
  std::condition_variable cv;
  int32_t done = 0;
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[r] = std::string("error: ") + e.what();
      }
      std::lock_guard lock(mu);
      ++done;
      cv.notify_all();
    });
  }
  {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(60), [&] { return done == n; })) {
      std::fprintf(stderr, "test_cpu_collective: ranks still waiting after 60 s (a collective hangs)\n");
      std::_Exit(1);
    }
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Values over six decades and both signs: sums depend on their order.
std::vector<float> random_values(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> decade(-3.0f, 3.0f);
  std::vector<float> v(count);
  for (auto& x : v) x = normal(rng) * std::pow(10.0f, decade(rng));
  return v;
}

bool same_bits(const float* a, const float* b, int64_t count) {
  return count == 0 || std::memcmp(a, b, static_cast<size_t>(count) * sizeof(float)) == 0;
}

// The first element whose bits differ, for the failure message (-1: none).
int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

void require_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
  }
}

}  // namespace

TEST_CASE("all_reduce: every rank gets the rank-order sum, bit for bit", "[cpu_collective]") {
  const std::vector<int64_t> counts = {1, 7, 1000, 0, 4099, 3};  // one group, calls in sequence: staging grows
  for (int32_t n = 1; n <= 4; ++n) {
    for (const bool add : {false, true}) {
      for (const bool in_place : {false, true}) {
        if (add && in_place) continue;  // out += Σ partial with out == partial is not a defined use
        CpuCollectiveGroup group(n);
        // partials[call][rank], outs[call][rank], the expected out of each call.
        std::vector<std::vector<std::vector<float>>> partials(counts.size()), outs(counts.size());
        std::vector<std::vector<float>> expected(counts.size());
        for (size_t c = 0; c < counts.size(); ++c) {
          const std::vector<float> before = random_values(counts[c], 7000 + c);
          for (int32_t r = 0; r < n; ++r) {
            partials[c].push_back(random_values(counts[c], 100 * c + r + 1));
            outs[c].push_back(in_place ? partials[c][r] : add ? before : std::vector<float>(counts[c], kNaN));
          }
          expected[c].resize(counts[c]);
          for (int64_t i = 0; i < counts[c]; ++i) {
            float s = partials[c][0][i];
            for (int32_t r = 1; r < n; ++r) s += partials[c][r][i];
            expected[c][i] = add ? before[i] + s : s;
          }
        }
        const auto errors = run_ranks(n, [&](int32_t r) {
          Collective& rank = group.rank(r);
          if (rank.rank() != r || rank.size() != n) throw std::runtime_error("rank()/size() wrong");
          for (size_t c = 0; c < counts.size(); ++c) {
            float* out = outs[c][r].data();
            float* partial = in_place ? out : partials[c][r].data();
            rank.all_reduce(partial, out, counts[c], add, nullptr);
          }
        });
        require_no_errors(errors);
        for (size_t c = 0; c < counts.size(); ++c) {
          for (int32_t r = 0; r < n; ++r) {
            INFO(n << " ranks, " << (add ? "add" : "store") << (in_place ? " in place" : "") << ", count "
                    << counts[c] << ", rank " << r << ": first differing element "
                    << first_difference(outs[c][r], expected[c]));
            CHECK(same_bits(outs[c][r].data(), expected[c].data(), counts[c]));
          }
        }
      }
    }
  }
}

TEST_CASE("all_reduce: the same bits on every run, whatever the thread timing", "[cpu_collective]") {
  constexpr int32_t n = 4;
  constexpr int64_t count = 513;
  CpuCollectiveGroup group(n);
  std::vector<std::vector<float>> partials;
  for (int32_t r = 0; r < n; ++r) partials.push_back(random_values(count, 50 + r));
  std::vector<float> first;
  for (int run = 0; run < 20; ++run) {
    std::vector<std::vector<float>> outs(n, std::vector<float>(count, kNaN));
    const auto errors = run_ranks(n, [&](int32_t r) {
      // Stagger the ranks differently on every run.
      std::this_thread::sleep_for(std::chrono::microseconds(((run + 1) * (r + 3) * 37) % 500));
      group.rank(r).all_reduce(partials[r].data(), outs[r].data(), count, false, nullptr);
    });
    require_no_errors(errors);
    if (run == 0) first = outs[0];
    for (int32_t r = 0; r < n; ++r) {
      INFO("run " << run << ", rank " << r);
      CHECK(same_bits(outs[r].data(), first.data(), count));
    }
  }
}

TEST_CASE("all_gather_columns: shards side by side, separate and in place", "[cpu_collective]") {
  for (int32_t n = 1; n <= 4; ++n) {
    for (const int64_t rows : {1, 5}) {
      for (const int64_t cols : {1, 3, 64}) {
        for (const bool aliased : {false, true}) {
          CpuCollectiveGroup group(n);
          const int64_t width = n * cols;
          std::vector<std::vector<float>> shards, outs;
          for (int32_t r = 0; r < n; ++r) {
            shards.push_back(random_values(rows * cols, 900 + r));
            std::vector<float> out(rows * width, kNaN);
            if (aliased) std::copy(shards[r].begin(), shards[r].end(), out.begin());  // the shard at out's start
            outs.push_back(out);
          }
          std::vector<float> expected(rows * width);
          for (int64_t row = 0; row < rows; ++row) {
            for (int32_t q = 0; q < n; ++q) {
              for (int64_t c = 0; c < cols; ++c) expected[row * width + q * cols + c] = shards[q][row * cols + c];
            }
          }
          const auto errors = run_ranks(n, [&](int32_t r) {
            const float* shard = aliased ? outs[r].data() : shards[r].data();
            group.rank(r).all_gather_columns(shard, outs[r].data(), rows, cols, nullptr);
            // Twice: the second call reuses the staging of the first.
            if (!aliased) group.rank(r).all_gather_columns(shard, outs[r].data(), rows, cols, nullptr);
          });
          require_no_errors(errors);
          for (int32_t r = 0; r < n; ++r) {
            INFO(n << " ranks, rows " << rows << ", cols " << cols << (aliased ? ", shard at out's start" : "")
                    << ", rank " << r << ": first differing element " << first_difference(outs[r], expected));
            CHECK(same_bits(outs[r].data(), expected.data(), rows * width));
          }
        }
      }
    }
  }
}

TEST_CASE("all_reduce then all_gather_columns on one group, as a forward calls them", "[cpu_collective]") {
  constexpr int32_t n = 3;
  CpuCollectiveGroup group(n);
  std::vector<std::vector<float>> partials, hidden(n, std::vector<float>(16, kNaN)), logits(n, std::vector<float>(2 * 4 * n, kNaN));
  for (int32_t r = 0; r < n; ++r) partials.push_back(random_values(16, 10 + r));
  const auto errors = run_ranks(n, [&](int32_t r) {
    Collective& rank = group.rank(r);
    for (int layer = 0; layer < 5; ++layer) rank.all_reduce(partials[r].data(), hidden[r].data(), 16, layer > 0, nullptr);
    std::vector<float> shard(2 * 4, static_cast<float>(r));
    rank.all_gather_columns(shard.data(), logits[r].data(), 2, 4, nullptr);
  });
  require_no_errors(errors);
  for (int32_t r = 0; r < n; ++r) {
    CHECK(same_bits(hidden[r].data(), hidden[0].data(), 16));
    for (int64_t i = 0; i < 2 * 4 * n; ++i) CHECK(logits[r][i] == static_cast<float>((i % (4 * n)) / 4));
  }
}

TEST_CASE("calls that differ across ranks fail on every rank, naming each rank's call", "[cpu_collective]") {
  for (int32_t n = 2; n <= 4; ++n) {
    SECTION("another count, " + std::to_string(n) + " ranks") {
      CpuCollectiveGroup group(n);
      std::vector<std::vector<float>> outs(n);
      const auto errors = run_ranks(n, [&](int32_t r) {
        const int64_t count = r == 1 ? 12 : 10;  // buffers exactly as long as each rank's count
        std::vector<float> partial(count, 1.0f);
        outs[r].assign(count, kNaN);
        group.rank(r).all_reduce(partial.data(), outs[r].data(), count, false, nullptr);
      });
      for (int32_t r = 0; r < n; ++r) {
        INFO("rank " << r << ": " << errors[r]);
        CHECK(errors[r].find("differ across ranks") != std::string::npos);
        CHECK(errors[r].find("rank 1 all_reduce(count 12, store)") != std::string::npos);
        CHECK(errors[r].find("rank 0 all_reduce(count 10, store)") != std::string::npos);
        for (float x : outs[r]) CHECK(std::isnan(x));  // nothing written
      }
      // The group stays aborted: a later call fails at once.
      float x = 1.0f, y = 0.0f;
      CHECK_THROWS_WITH(group.rank(0).all_reduce(&x, &y, 1, false, nullptr), Catch::Contains("aborted"));
    }
  }
  SECTION("another kind of call, another add, other rows and cols") {
    using Call = std::function<void(Collective&)>;
    float in[64] = {}, out[64] = {};
    const Call reduce_store = [&](Collective& c) { c.all_reduce(in, out, 4, false, nullptr); };
    const Call reduce_add = [&](Collective& c) { c.all_reduce(in, out, 4, true, nullptr); };
    const Call gather_2x3 = [&](Collective& c) { c.all_gather_columns(in, out, 2, 3, nullptr); };
    const Call gather_3x2 = [&](Collective& c) { c.all_gather_columns(in, out, 3, 2, nullptr); };
    const std::vector<std::pair<Call, Call>> pairs = {
        {reduce_store, gather_2x3}, {reduce_store, reduce_add}, {gather_2x3, gather_3x2}};
    for (const auto& pair : pairs) {  // no structured binding: the sanitizer build's clang 14 cannot capture one
      CpuCollectiveGroup group(2);
      const auto errors = run_ranks(2, [&](int32_t r) { (r == 0 ? pair.first : pair.second)(group.rank(r)); });
      for (const auto& e : errors) {
        INFO(e);
        CHECK(e.find("differ across ranks") != std::string::npos);
      }
    }
  }
}

TEST_CASE("abort from one rank unblocks the others, and later calls fail naming why", "[cpu_collective]") {
  for (int32_t n = 2; n <= 4; ++n) {
    CpuCollectiveGroup group(n);
    std::atomic<int32_t> waiting{0};
    const auto errors = run_ranks(n, [&](int32_t r) {
      std::vector<float> partial(8, 1.0f), out(8);
      if (r == 0) {
        // The others are (very likely) blocked in all_reduce by now; the test passes either way.
        while (waiting.load() < n - 1) std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        group.rank(0).abort("rank 0 ran out of memory");
        group.rank(0).all_reduce(partial.data(), out.data(), 8, false, nullptr);
      } else {
        ++waiting;
        group.rank(r).all_reduce(partial.data(), out.data(), 8, false, nullptr);
      }
    });
    for (int32_t r = 0; r < n; ++r) {
      INFO(n << " ranks, rank " << r << ": " << errors[r]);
      CHECK(errors[r].find("aborted: rank 0 ran out of memory") != std::string::npos);
      CHECK(errors[r].find("all_reduce on rank " + std::to_string(r)) != std::string::npos);
    }
    // A second abort keeps the first reason.
    group.abort("another reason");
    float x = 0.0f;
    CHECK_THROWS_WITH(group.rank(n - 1).all_gather_columns(&x, &x, 1, 1, nullptr),
                      Catch::Contains("rank 0 ran out of memory"));
  }
}

TEST_CASE("abort from a rank that never calls unblocks the ranks waiting for it", "[cpu_collective]") {
  // Rank 0 never arrives: the others post, then wait for it until rank 0's thread aborts the group.
  CpuCollectiveGroup group(3);
  const auto ran = run_ranks(3, [&](int32_t r) {
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      group.abort("watchdog: rank 0 stalled");
      return;
    }
    float x = 1.0f, y = 0.0f;
    group.rank(r).all_reduce(&x, &y, 1, true, nullptr);
  });
  CHECK(ran[0].empty());
  CHECK(ran[1].find("watchdog: rank 0 stalled") != std::string::npos);
  CHECK(ran[2].find("watchdog: rank 0 stalled") != std::string::npos);
}

TEST_CASE("group construction and rank lookup reject bad sizes", "[cpu_collective]") {
  CHECK_THROWS_AS(CpuCollectiveGroup(0), Error);
  CpuCollectiveGroup group(2);
  CHECK_THROWS_WITH(group.rank(2), Catch::Contains("ranks 0..1"));
  CHECK_THROWS_AS(group.rank(-1), Error);
  // One rank needs no other thread.
  CpuCollectiveGroup one(1);
  float partial[3] = {1.5f, -2.0f, 3.25f}, out[3] = {kNaN, kNaN, kNaN};
  one.rank(0).all_reduce(partial, out, 3, false, nullptr);
  CHECK((out[0] == 1.5f && out[1] == -2.0f && out[2] == 3.25f));
}

TEST_CASE("parallel_for from several threads at once gives each caller its own result", "[parallel_for]") {
  constexpr int32_t callers = 4;
  constexpr int64_t n = 200000;
  std::vector<std::vector<int64_t>> out(callers, std::vector<int64_t>(n, -1));
  std::atomic<int32_t> ready{0};
  const auto errors = run_ranks(callers, [&](int32_t t) {
    ++ready;
    while (ready.load() < callers) std::this_thread::yield();  // all callers start together
    for (int round = 0; round < 100; ++round) {
      std::vector<int64_t>& o = out[t];
      parallel_for(n, 1000, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) o[i] = i * (t + 1) + round;
        // A nested call runs inline on the calling thread.
        if (begin == 0) parallel_for(4000, 100, [&](int64_t b, int64_t e) { (void)b, (void)e; });
      });
      for (int64_t i = 0; i < n; ++i) {
        if (o[i] != i * (t + 1) + round) {
          throw std::runtime_error("caller " + std::to_string(t) + " round " + std::to_string(round) +
                                   ": element " + std::to_string(i) + " wrong");
        }
      }
    }
  });
  require_no_errors(errors);
}

TEST_CASE("parallel_for hands out every chunk exactly once, over short runs and across the workers' sleeps",
          "[parallel_for]") {
  // More workers than this machine's 2 cores (the yield path), thousands of back-to-back runs (late
  // workers meet the next run), and gaps longer than the workers' 200 µs of spinning (they sleep
  // and must be woken).
  set_parallel_threads(4, false);
  std::vector<std::atomic<int32_t>> hits(5000);
  int64_t expected = 0, visited = 0;
  for (int round = 0; round < 3000; ++round) {
    const int64_t n = 1 + (round * 7919) % 5000;
    parallel_for(n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
    });
    if (round % 500 == 0) std::this_thread::sleep_for(std::chrono::microseconds(500));
    expected += n;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t h = hits[static_cast<size_t>(i)].exchange(0, std::memory_order_relaxed);
      if (h != 1) FAIL("round " << round << ": element " << i << " of " << n << " visited " << h << " times");
      visited += h;
    }
  }
  set_parallel_threads(0, false);
  CHECK(visited == expected);
}
