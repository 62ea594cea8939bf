// GPU sampler against the CPU reference, plus timings. Exits 77 (ctest: skipped) without a GPU.
//
// The two samplers share one definition made of exactly rounded operations and integer mass
// (sampling_math.hpp), so tokens must match on every row: a float-summing sampler would differ
// where its cumulative sum lands within rounding of u; here that count is reported and must be 0.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "runtime/serving/philox.hpp"
#include "runtime/serving/sampler.hpp"
#include "runtime/serving/sampler_cpu.hpp"
#include "runtime/serving/sampling_math.hpp"

using namespace kiln;

namespace {

int g_failures = 0;

#define CUDA_OK(call)                                                                      \
  do {                                                                                     \
    const cudaError_t status_ = (call);                                                    \
    if (status_ != cudaSuccess) {                                                          \
      std::printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(status_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++g_failures;
    std::printf("FAIL %s\n", what.c_str());
  }
}

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t n) { CUDA_OK(cudaMalloc(&ptr, sizeof(T) * (n ? n : 1))); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

__global__ void philox_kernel(const PhiloxBlock* counters, const uint32_t* keys, PhiloxBlock* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = philox4x32_10(counters[i], keys[2 * i], keys[2 * i + 1]);
}

__global__ void exp_kernel(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = sampling_exp(in[i]);
}

void check_philox_on_device() {
  const std::vector<PhiloxBlock> counters = {{{0, 0, 0, 0}},
                                             {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
                                             {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}};
  const std::vector<uint32_t> keys = {0, 0, 0xffffffffu, 0xffffffffu, 0xa4093822u, 0x299f31d0u};
  const std::vector<PhiloxBlock> expected = {{{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
                                             {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
                                             {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}};
  DeviceBuffer<PhiloxBlock> d_counters(3), d_out(3);
  DeviceBuffer<uint32_t> d_keys(6);
  CUDA_OK(cudaMemcpy(d_counters.ptr, counters.data(), sizeof(PhiloxBlock) * 3, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_keys.ptr, keys.data(), sizeof(uint32_t) * 6, cudaMemcpyHostToDevice));
  philox_kernel<<<1, 32>>>(d_counters.ptr, d_keys.ptr, d_out.ptr, 3);
  CUDA_OK(cudaGetLastError());
  std::vector<PhiloxBlock> out(3);
  CUDA_OK(cudaMemcpy(out.data(), d_out.ptr, sizeof(PhiloxBlock) * 3, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 3; ++i) {
    for (int w = 0; w < 4; ++w) expect(out[i].v[w] == expected[i].v[w], "philox known answer on the device");
  }
  std::printf("philox4x32_10 on the device: known answers checked\n");
}

void check_exp_bits_on_device() {
  std::vector<float> in;
  for (float d = -81.0f; d <= 0.0f; d += 0.0001f) in.push_back(d);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-80.0f, 0.0f);
  for (int i = 0; i < 1000000; ++i) in.push_back(u(rng));
  in.push_back(0.0f);
  in.push_back(-0.0f);
  in.push_back(-std::numeric_limits<float>::infinity());
  const int n = static_cast<int>(in.size());
  DeviceBuffer<float> d_in(n), d_out(n);
  CUDA_OK(cudaMemcpy(d_in.ptr, in.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
  exp_kernel<<<(n + 255) / 256, 256>>>(d_in.ptr, d_out.ptr, n);
  CUDA_OK(cudaGetLastError());
  std::vector<float> out(n);
  CUDA_OK(cudaMemcpy(out.data(), d_out.ptr, sizeof(float) * n, cudaMemcpyDeviceToHost));
  int differ = 0;
  for (int i = 0; i < n; ++i) {
    if (float_bits(out[i]) != float_bits(sampling_exp(in[i]))) {
      if (differ < 5) std::printf("  sampling_exp(%.9g): device %.9g host %.9g\n", in[i], out[i], sampling_exp(in[i]));
      ++differ;
    }
  }
  std::printf("sampling_exp: %d of %d device results differ from the host in any bit\n", differ, n);
  expect(differ == 0, "sampling_exp bit-identical on host and device");
}

struct ParamSet {
  const char* name;
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
};

const ParamSet kParamSets[] = {
    {"greedy", 0.0f, 0, 1.0f, 0.0f},
    {"temperature 1", 1.0f, 0, 1.0f, 0.0f},
    {"t0.7 top_k 50", 0.7f, 50, 1.0f, 0.0f},
    {"top_p 0.9", 1.0f, 0, 0.9f, 0.0f},
    {"t0.8 min_p 0.05", 0.8f, 0, 1.0f, 0.05f},
    {"t0.9 k40 p0.95 minp0.02", 0.9f, 40, 0.95f, 0.02f},
    {"t1.5 top_p 0.5", 1.5f, 0, 0.5f, 0.0f},
    {"top_p 1e-6", 1.0f, 0, 1e-6f, 0.0f},
    {"top_k 1", 1.3f, 1, 1.0f, 0.0f},
    {"top_k 1000 top_p 0.99", 1.0f, 1000, 0.99f, 0.0f},
    {"top_k > V", 1.0f, 1 << 30, 1.0f, 0.0f},
};

// Rows of different shapes: spread-out logits, peaked ones, and coarse ones full of ties.
std::vector<float> make_logits(int32_t rows, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> logits(static_cast<size_t>(rows) * vocab);
  for (int32_t r = 0; r < rows; ++r) {
    float* row = logits.data() + static_cast<size_t>(r) * vocab;
    const int kind = r % 4;
    for (int32_t i = 0; i < vocab; ++i) {
      const float z = normal(rng);
      if (kind == 0) row[i] = 2.0f * z;
      if (kind == 1) row[i] = 4.0f * z - 3.0f;
      if (kind == 2) row[i] = std::round(z * 4.0f) / 4.0f;  // many exact ties
      if (kind == 3) row[i] = 0.5f * z;                     // flat: top-p sets are huge
    }
    if (kind == 1) row[rng() % vocab] = 25.0f;  // one dominant token
  }
  return logits;
}

void compare_with_cpu(CudaSampler& sampler) {
  const int32_t vocabs[] = {49152, 151936, 128256, 102400, 1000, 200, 1, 7, 4097};
  const int32_t rows = 24;
  int64_t compared = 0, token_mismatches = 0, status_mismatches = 0, near_boundary = 0;
  double worst_logprob = 0;
  for (int32_t vocab : vocabs) {
    std::vector<float> logits = make_logits(rows, vocab, 1000u + static_cast<uint32_t>(vocab));
    // Poison two rows: NaN and -inf (must fail on both samplers, the others must not notice).
    logits[static_cast<size_t>(5) * vocab + vocab / 2] = std::numeric_limits<float>::quiet_NaN();
    logits[static_cast<size_t>(11) * vocab + vocab - 1] = -std::numeric_limits<float>::infinity();
    DeviceBuffer<float> d_logits(logits.size());
    CUDA_OK(cudaMemcpy(d_logits.ptr, logits.data(), sizeof(float) * logits.size(), cudaMemcpyHostToDevice));
    for (const ParamSet& p : kParamSets) {
      std::vector<SamplerRow> sampler_rows(rows);
      for (int32_t r = 0; r < rows; ++r) {
        SamplerRow& row = sampler_rows[r];
        row.temperature = p.temperature;
        row.top_k = p.top_k;
        row.top_p = p.top_p;
        row.min_p = p.min_p;
        row.seed = 0x5eed0000ull + static_cast<uint64_t>(r) * 7919u + static_cast<uint64_t>(vocab);
        row.counter = static_cast<uint64_t>(r) * 3u;
        row.want_logprob = 1;
      }
      const std::vector<SampleOutput> gpu = sampler.sample(d_logits.ptr, vocab, vocab, sampler_rows, nullptr);
      for (int32_t r = 0; r < rows; ++r) {
        const std::span<const float> row_logits(logits.data() + static_cast<size_t>(r) * vocab, vocab);
        SampleTrace trace;
        const SampleOutput cpu = sample_row_cpu(row_logits, sampler_rows[r], &trace);
        ++compared;
        if (cpu.status != gpu[r].status) {
          ++status_mismatches;
          std::printf("  V=%d %s row %d: status cpu %d gpu %d\n", vocab, p.name, r, cpu.status, gpu[r].status);
          continue;
        }
        if (cpu.status != kSampleOk) continue;
        // A float-summing sampler could flip where u lies within ~1e-6 (relative) of a CDF step.
        if (p.temperature > 0.0f) {
          const double margin = static_cast<double>(std::min(trace.target - trace.mass_before,
                                                             trace.mass_through - 1 - trace.target));
          if (margin < 1e-6 * static_cast<double>(trace.kept_mass)) ++near_boundary;
        }
        if (cpu.token != gpu[r].token) {
          ++token_mismatches;
          if (token_mismatches <= 10) {
            std::printf("  V=%d %s row %d: token cpu %d gpu %d (threshold key %08x kept %llu target %llu)\n", vocab,
                        p.name, r, cpu.token, gpu[r].token, trace.threshold_key,
                        static_cast<unsigned long long>(trace.kept_mass), static_cast<unsigned long long>(trace.target));
          }
        }
        worst_logprob = std::max(worst_logprob, static_cast<double>(std::abs(cpu.logprob - gpu[r].logprob)));
      }
    }
  }
  std::printf("sampler: %lld rows compared over %zu vocabularies x %zu parameter sets\n",
              static_cast<long long>(compared), std::size(vocabs), std::size(kParamSets));
  std::printf("sampler: token mismatches %lld, status mismatches %lld, draws within 1e-6 of a CDF step %lld, "
              "worst |logprob difference| %.3g\n",
              static_cast<long long>(token_mismatches), static_cast<long long>(status_mismatches),
              static_cast<long long>(near_boundary), worst_logprob);
  expect(token_mismatches == 0, "GPU tokens equal CPU tokens");
  expect(status_mismatches == 0, "GPU NaN/inf status equals CPU status");
  expect(worst_logprob < 2e-4, "GPU logprobs equal CPU logprobs to float rounding");
}

void time_sampler() {
  const int32_t vocab = 151936;
  const int32_t max_rows = 64;
  const std::vector<float> logits = make_logits(max_rows, vocab, 77);
  DeviceBuffer<float> d_logits(logits.size());
  CUDA_OK(cudaMemcpy(d_logits.ptr, logits.data(), sizeof(float) * logits.size(), cudaMemcpyHostToDevice));
  DeviceBuffer<SamplerRow> d_rows(max_rows);
  DeviceBuffer<SampleOutput> d_out(max_rows);
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  const ParamSet timed[] = {kParamSets[0], kParamSets[1], kParamSets[2], kParamSets[3], kParamSets[5]};
  for (const ParamSet& p : timed) {
    for (int32_t batch : {1, 64}) {
      std::vector<SamplerRow> rows(batch);
      for (int32_t r = 0; r < batch; ++r) {
        rows[r].temperature = p.temperature;
        rows[r].top_k = p.top_k;
        rows[r].top_p = p.top_p;
        rows[r].min_p = p.min_p;
        rows[r].seed = 99 + r;
      }
      CUDA_OK(cudaMemcpy(d_rows.ptr, rows.data(), sizeof(SamplerRow) * batch, cudaMemcpyHostToDevice));
      for (int i = 0; i < 5; ++i) launch_sampler(d_logits.ptr, vocab, batch, vocab, d_rows.ptr, d_out.ptr, nullptr);
      const int iterations = 100;
      CUDA_OK(cudaEventRecord(start));
      for (int i = 0; i < iterations; ++i) {
        launch_sampler(d_logits.ptr, vocab, batch, vocab, d_rows.ptr, d_out.ptr, nullptr);
      }
      CUDA_OK(cudaEventRecord(stop));
      CUDA_OK(cudaEventSynchronize(stop));
      float ms = 0;
      CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
      const double us_per_call = 1000.0 * ms / iterations;
      std::printf("timing V=%d B=%2d %-24s %8.1f us per call, %7.2f us per row\n", vocab, batch, p.name,
                  us_per_call, us_per_call / batch);
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no GPU: skipped\n");
    return 77;
  }
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s\n", prop.name);
  try {
    check_philox_on_device();
    check_exp_bits_on_device();
    CudaSampler sampler(64);
    compare_with_cpu(sampler);
    time_sampler();
  } catch (const std::exception& e) {
    std::printf("FAIL %s\n", e.what());
    return 1;
  }
  if (g_failures == 0) {
    std::printf("all GPU sampler checks passed\n");
  } else {
    std::printf("%d GPU sampler checks FAILED\n", g_failures);
  }
  return g_failures == 0 ? 0 : 1;
}
