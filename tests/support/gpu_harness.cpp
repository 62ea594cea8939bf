#include "tests/support/gpu_harness.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "runtime/core/dtype.hpp"

namespace kiln::kernel_test {

namespace {
int g_failures = 0;
}

std::vector<uint16_t> random_bf16(size_t count, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<uint16_t> v(count);
  for (auto& x : v) {
    uint16_t b = 0;
    while ((b & 0x7fff) == 0) b = f32_to_bf16(dist(rng));
    x = b;
  }
  return v;
}

std::vector<float> random_f32(size_t count, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(count);
  for (auto& x : v) {
    do x = dist(rng);
    while (x == 0.0f);
  }
  return v;
}

std::vector<float> bf16_to_f32(const std::vector<uint16_t>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = kiln::bf16_to_f32(v[i]);
  return f;
}

PagedStep paged_step(const std::vector<std::pair<int, int>>& seqs, int page_size, std::mt19937& rng, StepPhase phase) {
  int max_pages = 0, total_pages = 0, tokens = 0;
  for (const auto& [cached, fresh] : seqs) {
    const int pages = (cached + fresh + page_size - 1) / page_size;
    max_pages = std::max(max_pages, pages);
    total_pages += pages;
    tokens += fresh;
  }
  const int num_seqs = static_cast<int>(seqs.size());
  PagedStep out{StepBuffer(StepCapacity{std::max(tokens, 1), std::max(num_seqs, 1), std::max(num_seqs, 1), max_pages + 1}),
                {}, total_pages + 2};
  std::vector<int> order(out.num_pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  StepBatch& step = out.step;
  step = out.buffer.view(phase, tokens, num_seqs, num_seqs);
  step.num_samples = num_seqs;
  step.query_start[0] = 0;
  int next_page = 0, row = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const auto [cached, fresh] = seqs[s];
    const int context = cached + fresh;
    const int pages = (context + page_size - 1) / page_size;
    int* table = step.block_tables.data() + static_cast<size_t>(s) * step.max_pages_per_seq;
    std::fill(table, table + step.max_pages_per_seq, -1);
    for (int p = 0; p < pages; ++p) table[p] = order[next_page++];
    for (int i = 0; i < fresh; ++i, ++row) {
      const int pos = cached + i;
      step.token_ids[row] = 0;
      step.positions[row] = pos;
      step.slot_mapping[row] = table[pos / page_size] * page_size + pos % page_size;
    }
    step.query_start[s + 1] = row;
    step.context_len[s] = context;
    step.logit_rows[s] = std::max(row - 1, 0);
  }
  return out;
}

std::string seq_list(const std::vector<std::pair<int, int>>& seqs) {
  std::string s;
  for (const auto& [cached, fresh] : seqs) {
    if (!s.empty()) s += ',';
    s.append(std::to_string(cached)).append("+").append(std::to_string(fresh));
  }
  return s;
}

std::string dims(std::initializer_list<long long> values, const char* names) {
  std::string s = names;
  s += " =";
  for (long long v : values) s += " " + std::to_string(v);
  return s;
}

Comparison compare(const std::vector<float>& ref, const std::vector<float>& got) {
  Comparison c;
  double err = 0.0, norm = 0.0;
  const size_t n = std::min(ref.size(), got.size());
  if (ref.size() != got.size()) c.nans = static_cast<long long>(std::max(ref.size(), got.size()) - n);
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(got[i])) {
      ++c.nans;
      continue;
    }
    const double d = static_cast<double>(ref[i]) - got[i];
    err += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
    c.max_abs = std::max(c.max_abs, std::abs(d));
  }
  c.nmse = norm > 0.0 ? err / norm : (err > 0.0 ? INFINITY : 0.0);
  return c;
}

bool expect(bool ok, const std::string& what) {
  if (!ok) {
    ++g_failures;
    std::printf("FAIL %s\n", what.c_str());
  }
  return ok;
}

bool expect_close(const std::string& what, const Comparison& c, double limit) {
  char detail[160];
  std::snprintf(detail, sizeof detail, ": nmse %.3e (limit %.1e), NaN %lld, max |diff| %.3e", c.nmse, limit, c.nans,
                c.max_abs);
  return expect(c.nans == 0 && c.nmse <= limit, what + detail);
}

int failures() { return g_failures; }

bool print_device_or_skip() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no GPU: skipped\n");
    return false;
  }
  cudaDeviceProp prop{};
  KILN_CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  return true;
}

int run_test_groups(const char* program, int argc, char** argv, const std::vector<TestGroup>& groups) {
  const auto known = [&](const char* name) {
    return std::any_of(groups.begin(), groups.end(),
                       [&](const TestGroup& g) { return std::strcmp(g.name, name) == 0; });
  };
  for (int i = 1; i < argc; ++i) {
    if (!known(argv[i])) {
      std::string names;
      for (const TestGroup& g : groups) names += std::string(names.empty() ? "" : ", ") + g.name;
      std::printf("%s: unknown group '%s' (expected one of: %s)\n", program, argv[i], names.c_str());
      return 2;
    }
  }
  if (!print_device_or_skip()) return 77;
  for (const TestGroup& g : groups) {
    const bool selected =
        argc == 1 || std::any_of(argv + 1, argv + argc, [&](const char* a) { return std::strcmp(a, g.name) == 0; });
    if (!selected) continue;
    std::printf("---- %s ----\n", g.name);
    std::fflush(stdout);
    g.run();
  }
  if (failures() > 0) {
    std::printf("%s: %d FAILED checks\n", program, failures());
    return 1;
  }
  std::printf("%s: all checks passed\n", program);
  return 0;
}

bool expect_clean_launch(const std::string& what) {
  KILN_CUDA_OK(cudaDeviceSynchronize());
  const cudaError_t status = cudaGetLastError();
  return expect(status == cudaSuccess, what + ": launch error: " + cudaGetErrorString(status));
}

bool quick_run() {
  static const bool quick = std::getenv("KILN_GPU_TEST_QUICK") != nullptr;
  return quick;
}

double median_us(const std::function<void(int)>& launch, int warmup, int iterations) {
  if (quick_run()) warmup = 0, iterations = 1;
  for (int i = 0; i < warmup; ++i) launch(i);
  KILN_CUDA_OK(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> events(2 * iterations);
  for (auto& e : events) KILN_CUDA_OK(cudaEventCreate(&e));
  for (int i = 0; i < iterations; ++i) {
    KILN_CUDA_OK(cudaEventRecord(events[2 * i]));
    launch(warmup + i);
    KILN_CUDA_OK(cudaEventRecord(events[2 * i + 1]));
  }
  KILN_CUDA_OK(cudaGetLastError());
  KILN_CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> ms(iterations);
  for (int i = 0; i < iterations; ++i) KILN_CUDA_OK(cudaEventElapsedTime(&ms[i], events[2 * i], events[2 * i + 1]));
  for (auto& e : events) cudaEventDestroy(e);
  std::nth_element(ms.begin(), ms.begin() + iterations / 2, ms.end());
  return 1000.0 * ms[iterations / 2];
}

double graph_us(const std::function<void(int, cudaStream_t)>& launch, int iterations, int replays) {
  if (quick_run()) iterations = 1, replays = 1;
  cudaStream_t stream = nullptr;
  KILN_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  KILN_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < iterations; ++i) launch(i, stream);
  KILN_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  KILN_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start = nullptr, stop = nullptr;
  KILN_CUDA_OK(cudaEventCreate(&start));
  KILN_CUDA_OK(cudaEventCreate(&stop));
  KILN_CUDA_OK(cudaGraphLaunch(exec, stream));  // warm-up: first-launch costs, caches
  std::vector<float> ms(replays);
  for (auto& m : ms) {
    KILN_CUDA_OK(cudaEventRecord(start, stream));
    KILN_CUDA_OK(cudaGraphLaunch(exec, stream));
    KILN_CUDA_OK(cudaEventRecord(stop, stream));
    KILN_CUDA_OK(cudaEventSynchronize(stop));
    KILN_CUDA_OK(cudaEventElapsedTime(&m, start, stop));
  }
  KILN_CUDA_OK(cudaGetLastError());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  std::nth_element(ms.begin(), ms.begin() + replays / 2, ms.end());
  return 1000.0 * ms[replays / 2] / iterations;
}

int copies_beyond_l2(size_t bytes) {
  int device = 0, l2 = 0;
  KILN_CUDA_OK(cudaGetDevice(&device));
  KILN_CUDA_OK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  const size_t want = 3 * static_cast<size_t>(l2);
  return static_cast<int>(std::max<size_t>(1, (want + bytes - 1) / std::max<size_t>(bytes, 1)));
}

RotatingWeights::RotatingWeights(const DeviceBuffer<uint16_t>& source)
    : elems_(source.size()), copies_(copies_beyond_l2(source.size() * 2)), buffer_(source.size() * copies_) {
  for (int i = 0; i < copies_; ++i) {
    KILN_CUDA_OK(cudaMemcpy(buffer_.get() + elems_ * i, source.get(), elems_ * 2, cudaMemcpyDeviceToDevice));
  }
}

void report(const std::string& op, const std::string& shape, double nmse, double us, double bytes, double flops) {
  char rate[48] = "";
  if (bytes > 0) std::snprintf(rate, sizeof rate, "%9.1f GB/s", bytes / (us * 1e-6) / 1e9);
  if (flops > 0) std::snprintf(rate, sizeof rate, "%9.1f TFLOP/s", flops / (us * 1e-6) / 1e12);
  std::printf("%-22s %-52s nmse %9.2e %10.2f us %s\n", op.c_str(), shape.c_str(), nmse, us, rate);
  std::fflush(stdout);
}

double measure_copy_gbps() {
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer<uint8_t> a(bytes), b(bytes);
  KILN_CUDA_OK(cudaMemset(a.get(), 1, bytes));
  const double us = median_us([&](int) { KILN_CUDA_OK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice)); },
                              3, 20);
  return 2.0 * bytes / (us * 1e-6) / 1e9;
}

}  // namespace kiln::kernel_test
