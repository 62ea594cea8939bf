// NcclGroup over every GPU present (one GPU: the communicator of one rank), against host results.
// Skipped (exit 77) without a GPU.
//
// Partials are multiples of 1/8 below 64 in magnitude, so every sum is exact in any order: NCCL's
// order of summation does not matter and results must match the host bit for bit, and every rank's
// out must hold the same bits. Each rank runs on its own thread with its device current and its own
// stream (NCCL needs every rank's call of a collective at once); graphs are captured per thread
// (cudaStreamCaptureModeThreadLocal) and replayed on fresh inputs.
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/parallel/nccl_collective.hpp"

using namespace kiln;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

void cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

int device_count() {
  int n = 0;
  cuda(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  return n;
}

std::vector<int> all_devices() {
  std::vector<int> devices(device_count());
  for (size_t i = 0; i < devices.size(); ++i) devices[i] = static_cast<int>(i);
  return devices;
}

// Device floats of the current device.
struct DeviceFloats {
  float* p = nullptr;
  int64_t n = 0;
  explicit DeviceFloats(int64_t count) : n(count) { cuda(cudaMalloc(&p, std::max<int64_t>(count, 1) * 4), "cudaMalloc"); }
  ~DeviceFloats() { cudaFree(p); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  // cudaMemcpy from pageable memory may return before its DMA has landed, and the ranks' streams
  // are non-blocking (not ordered after the legacy stream that copy runs on): without the
  // synchronize, a gather read its shard before it arrived (seen on an H200 with other GPU tests
  // running: zeros where values were expected).
  void put(const std::vector<float>& v, int64_t offset = 0) {
    cuda(cudaMemcpy(p + offset, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy to device");
    cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudaMemcpy to device");
  }
  std::vector<float> get() const {
    std::vector<float> v(n);
    cuda(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return v;
  }
};

// Runs body(r) on one thread per rank, device r current; returns each rank's error ("" if none).
// A run longer than 120 s is a hang: the program stops with a message.
std::vector<std::string> run_ranks(int32_t n, const std::function<void(int32_t)>& body) {
  std::vector<std::string> errors(n);
  std::mutex mu;
  std::condition_variable cv;
  int32_t done = 0;
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        cuda(cudaSetDevice(r), "cudaSetDevice");
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
    if (!cv.wait_for(lock, std::chrono::seconds(120), [&] { return done == n; })) {
      std::fprintf(stderr, "test_nccl_collective: ranks still running after 120 s (a collective hangs)\n");
      std::_Exit(1);
    }
  }
  for (auto& t : threads) t.join();
  return errors;
}

void require_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
  }
}

// Multiples of 1/8 in (-32, 32): sums of up to 8 ranks and an initial value are exact.
std::vector<float> eighths(int64_t count, int salt) {
  std::vector<float> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = static_cast<float>((i * 7 + salt * 13 + i / 5) % 511 - 255) / 8.0f;
  return v;
}

int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return -2;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], 4) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

void check_equal(const std::string& what, const std::vector<float>& got, const std::vector<float>& expected) {
  const int64_t at = first_difference(got, expected);
  INFO(what << ": first differing element " << at
            << (at >= 0 ? " (got " + std::to_string(got[at]) + ", expected " + std::to_string(expected[at]) + ")" : ""));
  CHECK(at == -1);
}

std::vector<float> reduce_expected(int32_t n, int64_t count, int call, bool add) {
  std::vector<float> sum = add ? eighths(count, 1000 + call) : std::vector<float>(count, 0.0f);
  for (int32_t r = 0; r < n; ++r) {
    const std::vector<float> p = eighths(count, 10 * call + r);
    for (int64_t i = 0; i < count; ++i) sum[i] += p[i];
  }
  return sum;
}

std::vector<float> gather_expected(int32_t n, int64_t rows, int64_t cols, int call) {
  std::vector<float> out(rows * n * cols);
  for (int32_t q = 0; q < n; ++q) {
    const std::vector<float> shard = eighths(rows * cols, 500 + 10 * call + q);
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t c = 0; c < cols; ++c) out[(row * n + q) * cols + c] = shard[row * cols + c];
    }
  }
  return out;
}

// One rank's all_reduce of call `call`: inputs set, the call on `stream`, out read back.
std::vector<float> reduce_on_rank(NcclCollective& rank, int64_t count, int call, bool add, cudaStream_t stream) {
  DeviceFloats partial(count), out(count);
  partial.put(eighths(count, 10 * call + rank.rank()));
  out.put(add ? eighths(count, 1000 + call) : std::vector<float>(count, kNaN));
  rank.all_reduce(partial.p, out.p, count, add, stream);
  cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return out.get();
}

std::vector<float> gather_on_rank(NcclCollective& rank, int64_t rows, int64_t cols, int call, bool aliased,
                                  cudaStream_t stream) {
  const int32_t n = rank.size();
  DeviceFloats shard(rows * cols), out(rows * n * cols);
  const std::vector<float> mine = eighths(rows * cols, 500 + 10 * call + rank.rank());
  out.put(std::vector<float>(rows * n * cols, kNaN));
  if (aliased) out.put(mine); else shard.put(mine);
  rank.all_gather_columns(aliased ? out.p : shard.p, out.p, rows, cols, stream);
  cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return out.get();
}

}  // namespace

TEST_CASE("NCCL all_reduce, store and add, every rank the host's sum", "[nccl]") {
  const int32_t n = device_count();
  NcclGroup group(all_devices());
  REQUIRE(group.size() == n);
  const std::vector<int64_t> counts = {1, 1000, 0, 65537};
  std::vector<std::vector<std::vector<float>>> got(n);  // [rank][case]
  const auto errors = run_ranks(n, [&](int32_t r) {
    NcclCollective& rank = group.rank(r);
    if (rank.rank() != r || rank.size() != n || rank.device() != r) throw std::runtime_error("rank()/size() wrong");
    cudaStream_t stream;
    cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    int call = 0;
    for (const bool add : {false, true}) {
      for (const int64_t count : counts) got[r].push_back(reduce_on_rank(rank, count, call++, add, stream));
    }
    cudaStreamDestroy(stream);
  });
  require_no_errors(errors);
  int call = 0;
  for (const bool add : {false, true}) {
    for (const int64_t count : counts) {
      const std::vector<float> expected = reduce_expected(n, count, call, add);
      for (int32_t r = 0; r < n; ++r) {
        check_equal(std::to_string(n) + " ranks, " + (add ? "add" : "store") + ", count " + std::to_string(count) +
                        ", rank " + std::to_string(r),
                    got[r][call], expected);
      }
      ++call;
    }
  }
}

TEST_CASE("NCCL all_gather_columns, rows 1 and 5, separate and in place", "[nccl]") {
  const int32_t n = device_count();
  NcclGroup group(all_devices());
  struct Case {
    int64_t rows, cols;
    bool aliased;
  };
  const std::vector<Case> cases = {{1, 3, false}, {1, 1000, false}, {1, 3, true},  {1, 1000, true},
                                   {5, 3, false}, {5, 1000, false}, {5, 3, true},  {5, 1000, true}};
  group.reserve_gather(5 * n * 1000);
  CHECK(group.rank(0).gather_reserved() == 5 * n * 1000);
  std::vector<std::vector<std::vector<float>>> got(n);
  const auto errors = run_ranks(n, [&](int32_t r) {
    cudaStream_t stream;
    cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (size_t c = 0; c < cases.size(); ++c) {
      got[r].push_back(gather_on_rank(group.rank(r), cases[c].rows, cases[c].cols, static_cast<int>(c),
                                      cases[c].aliased, stream));
    }
    cudaStreamDestroy(stream);
  });
  require_no_errors(errors);
  for (size_t c = 0; c < cases.size(); ++c) {
    const std::vector<float> expected = gather_expected(n, cases[c].rows, cases[c].cols, static_cast<int>(c));
    for (int32_t r = 0; r < n; ++r) {
      check_equal(std::to_string(n) + " ranks, rows " + std::to_string(cases[c].rows) + ", cols " +
                      std::to_string(cases[c].cols) + (cases[c].aliased ? ", shard at out's start" : "") + ", rank " +
                      std::to_string(r),
                  got[r][c], expected);
    }
  }
}

TEST_CASE("NCCL all_gather_columns of more rows than the staging holds goes in chunks, in place too", "[nccl]") {
  const int32_t n = device_count();
  NcclGroup group(all_devices());
  group.reserve_gather(2 * n * 1000);  // two rows at a time: 7 rows take 4 chunks, the last one first
  std::vector<std::vector<std::vector<float>>> got(n);
  const auto errors = run_ranks(n, [&](int32_t r) {
    cudaStream_t stream;
    cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (const bool aliased : {false, true}) got[r].push_back(gather_on_rank(group.rank(r), 7, 1000, 40, aliased, stream));
    cudaStreamDestroy(stream);
  });
  require_no_errors(errors);
  const std::vector<float> expected = gather_expected(n, 7, 1000, 40);
  for (int32_t r = 0; r < n; ++r) {
    check_equal("7 rows through staging of 2, separate, rank " + std::to_string(r), got[r][0], expected);
    check_equal("7 rows through staging of 2, in place, rank " + std::to_string(r), got[r][1], expected);
  }
}

TEST_CASE("NCCL all_gather_columns without staging for one row fails on every rank, before NCCL", "[nccl]") {
  const int32_t n = device_count();
  NcclGroup group(all_devices());
  const auto errors = run_ranks(n, [&](int32_t r) {
    DeviceFloats shard(5 * 4), out(5 * n * 4);
    group.rank(r).all_gather_columns(shard.p, out.p, 5, 4, nullptr);
  });
  for (int32_t r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].find("reserve_gather") != std::string::npos);
    CHECK(errors[r].find("needs " + std::to_string(n * 4) + " floats") != std::string::npos);
  }
}

TEST_CASE("NCCL calls captured in a CUDA graph, replayed on new inputs", "[nccl][graph]") {
  const int32_t n = device_count();
  NcclGroup group(all_devices());
  constexpr int64_t count = 4099, rows = 5, cols = 257;
  group.reserve_gather(rows * n * cols);
  std::vector<std::vector<std::vector<float>>> hidden(n), logits(n), logits_row(n);  // [rank][replay]
  std::vector<std::string> reserve_errors(n);
  const auto errors = run_ranks(n, [&](int32_t r) {
    NcclCollective& rank = group.rank(r);
    cudaStream_t stream;
    cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    DeviceFloats partial(count), out(count), shard(rows * cols), gathered(rows * n * cols), gathered_row(n * cols);
    // A forward's collectives: a store, an add, then the logits gather (5 rows, then 1 row in place).
    cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    rank.all_reduce(partial.p, out.p, count, false, stream);
    rank.all_reduce(partial.p, out.p, count, true, stream);
    rank.all_gather_columns(shard.p, gathered.p, rows, cols, stream);
    rank.all_gather_columns(gathered_row.p, gathered_row.p, 1, cols, stream);
    cudaGraph_t graph;
    cuda(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    cudaGraphExec_t exec;
    cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    // Growing staging now would free what the graph gathers through.
    try {
      rank.reserve_gather(rows * n * cols * 2);
    } catch (const Error& e) {
      reserve_errors[r] = e.what();
    }
    for (int replay = 0; replay < 3; ++replay) {
      partial.put(eighths(count, 10 * replay + r));
      out.put(std::vector<float>(count, kNaN));
      shard.put(eighths(rows * cols, 500 + 10 * replay + r));
      gathered.put(std::vector<float>(rows * n * cols, kNaN));
      gathered_row.put(std::vector<float>(n * cols, kNaN));
      gathered_row.put(eighths(cols, 500 + 10 * replay + r));  // the row's shard at out's start
      cuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
      cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      hidden[r].push_back(out.get());
      logits[r].push_back(gathered.get());
      logits_row[r].push_back(gathered_row.get());
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  });
  require_no_errors(errors);
  for (int32_t r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << reserve_errors[r]);
    CHECK(reserve_errors[r].find("captured graph") != std::string::npos);
  }
  for (int replay = 0; replay < 3; ++replay) {
    // store then add: out = Σ p after the store; the in-place add made partial Σ p, so out = 2 Σ p.
    std::vector<float> expected_hidden = reduce_expected(n, count, replay, false);
    for (float& x : expected_hidden) x *= 2.0f;
    const std::vector<float> expected_logits = gather_expected(n, rows, cols, replay);
    std::vector<float> expected_row(n * cols);
    for (int32_t q = 0; q < n; ++q) {
      const std::vector<float> s = eighths(cols, 500 + 10 * replay + q);
      std::copy(s.begin(), s.end(), expected_row.begin() + q * cols);
    }
    for (int32_t r = 0; r < n; ++r) {
      const std::string where = "replay " + std::to_string(replay) + ", rank " + std::to_string(r);
      check_equal("graph all_reduce store+add, " + where, hidden[r][replay], expected_hidden);
      check_equal("graph all_gather_columns rows 5, " + where, logits[r][replay], expected_logits);
      check_equal("graph all_gather_columns rows 1 in place, " + where, logits_row[r][replay], expected_row);
    }
  }
}

TEST_CASE("NCCL calls of many sizes captured on a new group, with no call before", "[nccl][graph]") {
  // NCCL picks its algorithm and protocol by size; none may need connecting under capture.
  const int32_t n = device_count();
  NcclGroup group(all_devices());
  const std::vector<int64_t> counts = {1, 300, 4099, 70000, 1 << 21};
  const std::vector<int64_t> gather_cols = {1, 100, 100000};
  constexpr int64_t rows = 3;
  group.reserve_gather(rows * n * gather_cols.back());
  std::vector<std::vector<std::vector<float>>> reduced(n), gathered(n);  // [rank][case]
  const auto errors = run_ranks(n, [&](int32_t r) {
    NcclCollective& rank = group.rank(r);
    cudaStream_t stream;
    cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    std::vector<std::unique_ptr<DeviceFloats>> partials, outs, shards, logits;
    for (size_t c = 0; c < counts.size(); ++c) {
      partials.push_back(std::make_unique<DeviceFloats>(counts[c]));
      outs.push_back(std::make_unique<DeviceFloats>(counts[c]));
      partials.back()->put(eighths(counts[c], 10 * static_cast<int>(c) + r));
      outs.back()->put(std::vector<float>(counts[c], kNaN));
    }
    for (size_t c = 0; c < gather_cols.size(); ++c) {
      shards.push_back(std::make_unique<DeviceFloats>(rows * gather_cols[c]));
      logits.push_back(std::make_unique<DeviceFloats>(rows * n * gather_cols[c]));
      shards.back()->put(eighths(rows * gather_cols[c], 500 + 10 * static_cast<int>(c) + r));
      logits.back()->put(std::vector<float>(rows * n * gather_cols[c], kNaN));
    }
    cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    for (size_t c = 0; c < counts.size(); ++c) rank.all_reduce(partials[c]->p, outs[c]->p, counts[c], false, stream);
    for (size_t c = 0; c < gather_cols.size(); ++c) {
      rank.all_gather_columns(shards[c]->p, logits[c]->p, rows, gather_cols[c], stream);
    }
    cudaGraph_t graph;
    cuda(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    cudaGraphExec_t exec;
    cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    cuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    for (auto& out : outs) reduced[r].push_back(out->get());
    for (auto& out : logits) gathered[r].push_back(out->get());
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  });
  require_no_errors(errors);
  for (int32_t r = 0; r < n; ++r) {
    for (size_t c = 0; c < counts.size(); ++c) {
      check_equal("graph all_reduce count " + std::to_string(counts[c]) + ", rank " + std::to_string(r),
                  reduced[r][c], reduce_expected(n, counts[c], static_cast<int>(c), false));
    }
    for (size_t c = 0; c < gather_cols.size(); ++c) {
      check_equal("graph all_gather_columns cols " + std::to_string(gather_cols[c]) + ", rank " + std::to_string(r),
                  gathered[r][c], gather_expected(n, rows, gather_cols[c], static_cast<int>(c)));
    }
  }
}

TEST_CASE("NCCL abort: a rank waiting for the others returns, later calls fail naming why", "[nccl][abort]") {
  const int32_t n = device_count();
  NcclGroup group(all_devices());
  std::atomic<bool> enqueued{false};
  std::thread aborter([&] {
    const auto start = std::chrono::steady_clock::now();
    while (!enqueued.load() && std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    group.abort("rank 1 lost its GPU");
  });
  const auto errors = run_ranks(n, [&](int32_t r) {
    NcclCollective& rank = group.rank(r);
    cudaStream_t stream;
    cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    // A first call on every rank sets up NCCL's connections.
    reduce_on_rank(rank, 64, 0, false, stream);
    if (r == 0) {
      // Rank 0 alone: with other ranks its kernel waits for them until the abort.
      DeviceFloats partial(64), out(64);
      rank.all_reduce(partial.p, out.p, 64, false, stream);
      enqueued.store(true);
      cudaStreamSynchronize(stream);  // returns once the abort stops the kernel (its status is NCCL's)
      cudaGetLastError();
    }
    while (!group.aborted()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    DeviceFloats partial(8), out(8);
    rank.all_reduce(partial.p, out.p, 8, true, stream);  // throws
    cudaStreamDestroy(stream);
  });
  aborter.join();
  for (int32_t r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].find("all_reduce on rank " + std::to_string(r)) != std::string::npos);
    CHECK(errors[r].find("aborted: rank 1 lost its GPU") != std::string::npos);
  }
  group.abort("again");  // a second abort is harmless and keeps the first reason
  CHECK_THROWS_WITH(group.rank(0).reserve_gather(1 << 20), Catch::Contains("rank 1 lost its GPU"));
}

TEST_CASE("NCCL group rejects bad devices and ranks", "[nccl]") {
  const int32_t n = device_count();
  CHECK_THROWS_WITH(NcclGroup(std::vector<int>{}), Catch::Contains("no devices"));
  CHECK_THROWS_WITH(NcclGroup(std::vector<int>{n}), Catch::Contains("does not exist"));
  if (n >= 2) CHECK_THROWS_WITH(NcclGroup(std::vector<int>{0, 0}), Catch::Contains("named twice"));
  NcclGroup group(all_devices());
  CHECK_THROWS_WITH(group.rank(n), Catch::Contains("ranks 0.."));
}
