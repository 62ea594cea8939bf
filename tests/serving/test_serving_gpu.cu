// GPU sampler against the CPU reference (Catch2; skipped without a GPU), its timings (a hidden
// test case: test_serving_gpu "[.timing]"), and the serving soak on CUDA ("[soak]").
//
// The two samplers share one definition made of exactly rounded operations and integer mass
// (sampling_math.hpp), so tokens must match on every row: a float-summing sampler would differ
// where its cumulative sum lands within rounding of u; here that count is reported and must be 0.
// Every row is sampled in batches of 1, 2, 3, 8 and 64 rows, packed and with padded (unaligned)
// rows, through CudaSampler, through a workspace that splits rows into slices of as few as 4 tokens,
// and through the one-block-per-row kernel; captured launches are replayed from a CUDA graph.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "model.hpp"  // generated/tiny-llama, for the soak
#include "runtime/serving/philox.hpp"
#include "runtime/serving/sample_batch.hpp"
#include "runtime/serving/sampler.hpp"
#include "runtime/serving/sampler_cpu.hpp"
#include "runtime/serving/sampling_math.hpp"
#include "tests/support/gpu_checks.hpp"
#include "tests/support/gpu_harness.hpp"
#include "tests/support/soak.hpp"

using namespace kiln;

namespace {

using kernel_test::DeviceBuffer;

void expect(bool ok, const std::string& what) {
  INFO(what);
  CHECK(ok);
}

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
  DeviceBuffer<PhiloxBlock> d_counters(counters), d_out(3);
  DeviceBuffer<uint32_t> d_keys(keys);
  philox_kernel<<<1, 32>>>(d_counters.get(), d_keys.get(), d_out.get(), 3);
  KILN_CUDA_OK(cudaGetLastError());
  const std::vector<PhiloxBlock> out = d_out.download();
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
  DeviceBuffer<float> d_in(in), d_out(n);
  exp_kernel<<<(n + 255) / 256, 256>>>(d_in.get(), d_out.get(), n);
  KILN_CUDA_OK(cudaGetLastError());
  const std::vector<float> out = d_out.download();
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
    {"t1e-5 (sampled: ties at the top)", 1e-5f, 0, 1.0f, 0.0f},
};
constexpr size_t kNumParamSets = std::size(kParamSets);
// The timed sets: greedy, temperature 1, top-k, top-p, all filters.
constexpr size_t kTimedSets[] = {0, 1, 2, 3, 5};

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

// Row r of a batch sampled with parameter set `set` (kNumParamSets: "mixed", row r takes set r mod n).
SamplerRow make_row(size_t set, int32_t r, int32_t vocab) {
  const ParamSet& p = kParamSets[set < kNumParamSets ? set : static_cast<size_t>(r) % kNumParamSets];
  SamplerRow row;
  row.temperature = p.temperature;
  row.top_k = p.top_k;
  row.top_p = p.top_p;
  row.min_p = p.min_p;
  row.seed = 0x5eed0000ull + static_cast<uint64_t>(r) * 7919u + static_cast<uint64_t>(vocab);
  row.counter = static_cast<uint64_t>(r) * 3u;
  row.want_logprob = (r % 5 != 3) ? 1 : 0;  // most rows want one; some rows skip that pass
  return row;
}

const char* set_name(size_t set) { return set < kNumParamSets ? kParamSets[set].name : "mixed"; }

// A logits matrix on the device, rows `stride` apart; the padding between rows holds NaN, so a read
// past the vocabulary turns the row's status bad.
struct DeviceLogits {
  DeviceBuffer<float> buffer;
  int64_t stride;
  DeviceLogits(const std::vector<float>& logits, int32_t rows, int32_t vocab, int64_t stride_)
      : buffer(padded(logits, rows, vocab, stride_)), stride(stride_) {}

  static std::vector<float> padded(const std::vector<float>& logits, int32_t rows, int32_t vocab, int64_t stride) {
    std::vector<float> out(static_cast<size_t>(rows) * stride, std::numeric_limits<float>::quiet_NaN());
    for (int32_t r = 0; r < rows; ++r) {
      std::copy_n(logits.data() + static_cast<size_t>(r) * vocab, vocab, out.data() + static_cast<size_t>(r) * stride);
    }
    return out;
  }
};

// The ways of running the GPU sampler that must all agree with the CPU.
struct Launcher {
  std::string name;
  CudaSampler* sampler;          // CudaSampler::sample (its default workspace)
  SamplerWorkspace* workspace;   // else launch_sampler with this workspace, or none: one block per row
};

struct Tally {
  int64_t compared = 0, token_mismatches = 0, status_mismatches = 0;
  double worst_logprob = 0;
};

// Batches of `batch` consecutive rows of `rows`, each batch one launch; outputs of all rows.
std::vector<SampleOutput> run_batches(const Launcher& launcher, const DeviceLogits& logits, int32_t rows, int32_t vocab,
                                      int32_t batch, const std::vector<SamplerRow>& host_rows,
                                      const DeviceBuffer<SamplerRow>& device_rows, DeviceBuffer<SampleOutput>& device_out) {
  std::vector<SampleOutput> out(rows, SampleOutput{-7, -7.0f, -7});
  const int32_t full = rows / batch * batch;  // whole batches only: "B = 3" means three rows
  if (launcher.sampler) {
    for (int32_t start = 0; start < full; start += batch) {
      const std::vector<SampleOutput> got = launcher.sampler->sample(
          logits.buffer.get() + start * logits.stride, logits.stride, vocab,
          std::span<const SamplerRow>(host_rows.data() + start, batch), nullptr);
      std::copy(got.begin(), got.end(), out.begin() + start);
    }
    return out;
  }
  // Poison the outputs: every row compared must have been written by this run.
  device_out.upload(std::vector<SampleOutput>(rows, SampleOutput{-7, -7.0f, -7}));
  for (int32_t start = 0; start < full; start += batch) {
    const float* first = logits.buffer.get() + start * logits.stride;
    if (launcher.workspace) {
      launch_sampler(first, logits.stride, batch, vocab, device_rows.get() + start, device_out.get() + start,
                     *launcher.workspace, nullptr);
    } else {
      launch_sampler(first, logits.stride, batch, vocab, device_rows.get() + start, device_out.get() + start, nullptr);
    }
  }
  return device_out.download();
}

void compare_with_cpu(const std::vector<Launcher>& launchers) {
  const int32_t vocabs[] = {49152, 151936, 128256, 102400, 1000, 200, 1, 7, 4097};
  // Under a sanitizer (quick_run) one batch of all 64 rows stands for all: a batch launches its
  // blocks the same way at any size, and smaller batches launch 64 / batch times per layout and
  // parameter set (racecheck spent over 7 minutes on batches of 8 and 64).
  const std::vector<int32_t> batches =
      kernel_test::quick_run() ? std::vector<int32_t>{64} : std::vector<int32_t>{1, 2, 3, 8, 64};
  const int32_t rows = 64;
  std::vector<Tally> tallies(launchers.size());
  int64_t cpu_rows = 0, near_boundary = 0;
  int printed = 0;
  DeviceBuffer<SamplerRow> device_rows(rows);
  DeviceBuffer<SampleOutput> device_out(rows);
  for (int32_t vocab : vocabs) {
    std::vector<float> logits = make_logits(rows, vocab, 1000u + static_cast<uint32_t>(vocab));
    // Poison two rows: NaN and -inf (must fail on both samplers, the others must not notice).
    logits[static_cast<size_t>(5) * vocab + vocab / 2] = std::numeric_limits<float>::quiet_NaN();
    logits[static_cast<size_t>(11) * vocab + vocab - 1] = -std::numeric_limits<float>::infinity();
    // Packed rows, and rows 5 floats apart past the vocabulary (most rows then start unaligned).
    const DeviceLogits layouts[] = {DeviceLogits(logits, rows, vocab, vocab), DeviceLogits(logits, rows, vocab, vocab + 5)};
    for (size_t set = 0; set <= kNumParamSets; ++set) {
      std::vector<SamplerRow> sampler_rows(rows);
      std::vector<SampleOutput> expected(rows);
      for (int32_t r = 0; r < rows; ++r) {
        sampler_rows[r] = make_row(set, r, vocab);
        SampleTrace trace;
        const std::span<const float> row_logits(logits.data() + static_cast<size_t>(r) * vocab, vocab);
        expected[r] = sample_row_cpu(row_logits, sampler_rows[r], &trace);
        ++cpu_rows;
        // A float-summing sampler could flip where u lies within ~1e-6 (relative) of a CDF step.
        if (expected[r].status == kSampleOk && !row_is_greedy(sampler_rows[r])) {
          const double margin = static_cast<double>(std::min(trace.target - trace.mass_before,
                                                             trace.mass_through - 1 - trace.target));
          if (margin < 1e-6 * static_cast<double>(trace.kept_mass)) ++near_boundary;
        }
      }
      device_rows.upload(sampler_rows);
      for (size_t l = 0; l < launchers.size(); ++l) {
        for (const DeviceLogits& layout : layouts) {
          for (int32_t batch : batches) {
            const std::vector<SampleOutput> gpu =
                run_batches(launchers[l], layout, rows, vocab, batch, sampler_rows, device_rows, device_out);
            const int32_t full = rows / batch * batch;
            Tally& t = tallies[l];
            for (int32_t r = 0; r < full; ++r) {
              const SampleOutput& cpu = expected[r];
              ++t.compared;
              const bool status_differs = cpu.status != gpu[r].status;
              const bool token_differs = !status_differs && cpu.status == kSampleOk && cpu.token != gpu[r].token;
              if (status_differs) ++t.status_mismatches;
              if (token_differs) ++t.token_mismatches;
              if ((status_differs || token_differs) && printed < 20) {
                ++printed;
                std::printf("  %s: V=%d stride %lld B=%d %s row %d: cpu token %d status %d, gpu token %d status %d\n",
                            launchers[l].name.c_str(), vocab, static_cast<long long>(layout.stride), batch,
                            set_name(set), r, cpu.token, cpu.status, gpu[r].token, gpu[r].status);
              }
              if (!status_differs && !token_differs && cpu.status == kSampleOk && sampler_rows[r].want_logprob) {
                t.worst_logprob = std::max(t.worst_logprob, static_cast<double>(std::abs(cpu.logprob - gpu[r].logprob)));
              }
            }
          }
        }
      }
    }
  }
  std::string batch_list;
  for (int32_t batch : batches) batch_list += (batch_list.empty() ? "" : ", ") + std::to_string(batch);
  std::printf("sampler: %lld CPU rows over %zu vocabularies x %zu parameter sets (+ mixed), 2 row layouts, "
              "batches of %s; draws within 1e-6 of a CDF step %lld\n",
              static_cast<long long>(cpu_rows), std::size(vocabs), kNumParamSets, batch_list.c_str(),
              static_cast<long long>(near_boundary));
  for (size_t l = 0; l < launchers.size(); ++l) {
    const Tally& t = tallies[l];
    std::printf("sampler [%s]: %lld rows compared, token mismatches %lld, status mismatches %lld, "
                "worst |logprob difference| %.3g\n",
                launchers[l].name.c_str(), static_cast<long long>(t.compared), static_cast<long long>(t.token_mismatches),
                static_cast<long long>(t.status_mismatches), t.worst_logprob);
    expect(t.token_mismatches == 0, launchers[l].name + ": GPU tokens equal CPU tokens");
    expect(t.status_mismatches == 0, launchers[l].name + ": GPU NaN/inf status equals CPU status");
    expect(t.worst_logprob < 2e-4, launchers[l].name + ": GPU logprobs equal CPU logprobs to float rounding");
  }
}

// The launch recorded once in a CUDA graph and replayed with new row parameters each time (what a
// captured decode step does): every replay must match the CPU.
void check_graph_capture(SamplerWorkspace& workspace) {
  const int32_t vocab = 151936;
  const int32_t rows = 4;
  const std::vector<float> logits = make_logits(rows, vocab, 4242);
  DeviceBuffer<float> d_logits(logits);
  DeviceBuffer<SamplerRow> d_rows(rows);
  DeviceBuffer<SampleOutput> d_out(rows);
  cudaStream_t stream;
  KILN_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int mismatches = 0, replays = 0;
  for (int32_t batch : {1, rows}) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    KILN_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    launch_sampler(d_logits.get(), vocab, batch, vocab, d_rows.get(), d_out.get(), workspace, stream);
    KILN_CUDA_OK(cudaStreamEndCapture(stream, &graph));
    KILN_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (uint64_t step = 0; step < 2 * kNumParamSets; ++step) {
      std::vector<SamplerRow> host_rows(batch);
      for (int32_t r = 0; r < batch; ++r) {
        host_rows[r] = make_row((step + r) % (kNumParamSets + 1), r, vocab);
        host_rows[r].counter = step;
      }
      KILN_CUDA_OK(cudaMemcpyAsync(d_rows.get(), host_rows.data(), sizeof(SamplerRow) * batch, cudaMemcpyHostToDevice, stream));
      KILN_CUDA_OK(cudaGraphLaunch(exec, stream));
      std::vector<SampleOutput> gpu(batch);
      KILN_CUDA_OK(cudaMemcpyAsync(gpu.data(), d_out.get(), sizeof(SampleOutput) * batch, cudaMemcpyDeviceToHost, stream));
      KILN_CUDA_OK(cudaStreamSynchronize(stream));
      ++replays;
      for (int32_t r = 0; r < batch; ++r) {
        const SampleOutput cpu = sample_row_cpu(
            std::span<const float>(logits.data() + static_cast<size_t>(r) * vocab, vocab), host_rows[r]);
        if (cpu.token != gpu[r].token || cpu.status != gpu[r].status) ++mismatches;
      }
    }
    KILN_CUDA_OK(cudaGraphExecDestroy(exec));
    KILN_CUDA_OK(cudaGraphDestroy(graph));
  }
  KILN_CUDA_OK(cudaStreamDestroy(stream));
  std::printf("graph capture: %d replays of captured launches (B = 1 and %d, new parameters each time), "
              "%d token/status mismatches\n", replays, rows, mismatches);
  expect(mismatches == 0, "captured sampler launches match the CPU");
}

// Microseconds per launch_sampler call, `iterations` back-to-back launches on the default stream
// (or replays of one captured launch with as_graph).
double time_launches(const float* logits, int32_t vocab, int32_t batch, const SamplerRow* rows, SampleOutput* out,
                     SamplerWorkspace* workspace, bool as_graph) {
  auto launch = [&](cudaStream_t stream) {
    if (workspace) {
      launch_sampler(logits, vocab, batch, vocab, rows, out, *workspace, stream);
    } else {
      launch_sampler(logits, vocab, batch, vocab, rows, out, stream);
    }
  };
  cudaStream_t stream;
  KILN_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraphExec_t exec = nullptr;
  if (as_graph) {
    cudaGraph_t graph;
    KILN_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    launch(stream);
    KILN_CUDA_OK(cudaStreamEndCapture(stream, &graph));
    KILN_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    KILN_CUDA_OK(cudaGraphDestroy(graph));
  }
  auto run = [&] {
    if (exec) {
      KILN_CUDA_OK(cudaGraphLaunch(exec, stream));
    } else {
      launch(stream);
    }
  };
  cudaEvent_t start, stop;
  KILN_CUDA_OK(cudaEventCreate(&start));
  KILN_CUDA_OK(cudaEventCreate(&stop));
  for (int i = 0; i < 5; ++i) run();
  const int iterations = 100;
  KILN_CUDA_OK(cudaEventRecord(start, stream));
  for (int i = 0; i < iterations; ++i) run();
  KILN_CUDA_OK(cudaEventRecord(stop, stream));
  KILN_CUDA_OK(cudaEventSynchronize(stop));
  float ms = 0;
  KILN_CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (exec) KILN_CUDA_OK(cudaGraphExecDestroy(exec));
  KILN_CUDA_OK(cudaStreamDestroy(stream));
  return 1000.0 * ms / iterations;
}

void time_sampler(SamplerWorkspace& workspace) {
  const int32_t vocab = 151936;
  const int32_t max_rows = 64;
  const std::vector<float> logits = make_logits(max_rows, vocab, 77);
  DeviceBuffer<float> d_logits(logits);
  DeviceBuffer<SamplerRow> d_rows(max_rows);
  DeviceBuffer<SampleOutput> d_out(max_rows);
  auto upload = [&](const ParamSet& p, int32_t batch) {
    std::vector<SamplerRow> rows(batch);
    for (int32_t r = 0; r < batch; ++r) {
      rows[r].temperature = p.temperature;
      rows[r].top_k = p.top_k;
      rows[r].top_p = p.top_p;
      rows[r].min_p = p.min_p;
      rows[r].seed = 99 + r;
    }
    d_rows.upload(rows);
  };
  std::printf("workspace: %d resident blocks, up to %d rows split\n", workspace.resident_blocks(), workspace.max_rows());
  for (size_t set : kTimedSets) {
    const ParamSet& p = kParamSets[set];
    for (int32_t batch : {1, 4, 64}) {
      upload(p, batch);
      const SamplerWorkspace::Split split = workspace.split(batch, vocab);
      const double us = time_launches(d_logits.get(), vocab, batch, d_rows.get(), d_out.get(), &workspace, false);
      std::printf("timing V=%d B=%2d %-24s %8.1f us per call, %7.2f us per row  (%d blocks per row)\n", vocab, batch,
                  p.name, us, us / batch, split.blocks_per_row);
    }
  }
  // The same launches replayed from a graph (no launch overhead), and the one-block-per-row kernel.
  for (size_t set : kTimedSets) {
    const ParamSet& p = kParamSets[set];
    for (int32_t batch : {1, 4}) {
      upload(p, batch);
      const double us = time_launches(d_logits.get(), vocab, batch, d_rows.get(), d_out.get(), &workspace, true);
      std::printf("timing V=%d B=%2d %-24s %8.1f us per graph replay\n", vocab, batch, p.name, us);
    }
    for (int32_t batch : {1, 64}) {
      upload(p, batch);
      const double us = time_launches(d_logits.get(), vocab, batch, d_rows.get(), d_out.get(), nullptr, false);
      std::printf("timing V=%d B=%2d %-24s %8.1f us per call, %7.2f us per row  (one block per row)\n", vocab, batch,
                  p.name, us, us / batch);
    }
  }
  // How the B = 1 latency depends on the smallest slice a block takes (kSamplerMinTokensPerBlock).
  for (int32_t min_tokens : {256, 512, 1024, 2048, 4096, 8192}) {
    SamplerWorkspace tuned(max_rows, min_tokens);
    for (size_t set : {size_t{0}, size_t{3}}) {
      upload(kParamSets[set], 1);
      const double us = time_launches(d_logits.get(), vocab, 1, d_rows.get(), d_out.get(), &tuned, false);
      std::printf("timing V=%d B= 1 %-24s %8.1f us per call with min %d tokens per block (%d blocks)\n", vocab,
                  kParamSets[set].name, us, min_tokens, tuned.split(1, vocab).blocks_per_row);
    }
  }
}

// `batch` sampled by the CPU and by the GPU over the same logits, and how many logits the GPU left
// other than they were (the edits are undone after sampling).
struct BothSamples {
  SampleResult cpu, gpu;
  int64_t not_restored = 0;
};
BothSamples sample_both(CudaSampler& sampler, const std::vector<float>& logits, int32_t rows, int32_t vocab,
                        const SampleBatch& batch) {
  BothSamples out;
  out.cpu = sample_batch_cpu(logits, vocab, batch);
  DeviceLogits device(logits, rows, vocab, vocab);
  out.gpu = sampler.sample(device.buffer.get(), vocab, vocab, batch, nullptr);
  const std::vector<float> after = device.buffer.download();
  for (size_t i = 0; i < logits.size(); ++i) out.not_restored += float_bits(after[i]) != float_bits(logits[i]);
  return out;
}

// CudaSampler::sample(SampleBatch) against sample_batch_cpu: logit edits (logit_bias, min_tokens'
// bans, repetition / frequency / presence penalties) must give the same tokens, the logits must be
// back to their raw values afterwards, and chosen and top-N logprobs must agree to float rounding.
void compare_batches_with_cpu(CudaSampler& sampler) {
  const int32_t vocabs[] = {151936, 49152, 1000, 7};
  int64_t compared = 0, token_mismatches = 0, top_id_mismatches = 0, restored_mismatches = 0;
  double worst_logprob = 0;
  for (const int32_t vocab : vocabs) {
    const int32_t rows = 24;
    const std::vector<float> logits = make_logits(rows, vocab, 4242u + static_cast<uint32_t>(vocab));
    SampleBatch batch;
    batch.edit_offsets.push_back(0);
    std::mt19937 rng(static_cast<uint32_t>(vocab));
    for (int32_t r = 0; r < rows; ++r) {
      SamplerRow row = make_row(kNumParamSets, r, vocab);
      row.want_logprob = r % 3 != 1;
      row.top_logprobs = (r * 7) % (kMaxTopLogprobs + 1);
      batch.rows.push_back(row);
      // Edits of every kind on distinct tokens, sorted by token (as make_logit_edits gives them).
      std::vector<int32_t> tokens;
      for (int32_t k = 0; k < std::min(vocab, 1 + r * 3); ++k) tokens.push_back(static_cast<int32_t>(rng() % vocab));
      std::sort(tokens.begin(), tokens.end());
      tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
      for (size_t k = 0; k < tokens.size(); ++k) {
        LogitEdit e;
        e.token = tokens[k];
        e.bias = (k % 4 == 0) ? 5.0f - static_cast<float>(r) : 0.0f;
        e.repetition = (r % 2 == 0) ? 1.3f : 0.7f;
        e.frequency = 0.5f * static_cast<float>(k % 3);
        e.presence = (k % 2) ? 0.25f : 0.0f;
        e.banned = (k % 7 == 3) ? 1 : 0;
        batch.edits.push_back(e);
      }
      batch.edit_offsets.push_back(static_cast<int32_t>(batch.edits.size()));
    }
    const BothSamples both = sample_both(sampler, logits, rows, vocab, batch);
    const SampleResult& cpu = both.cpu;
    const SampleResult& gpu = both.gpu;
    restored_mismatches += both.not_restored;
    for (int32_t r = 0; r < rows; ++r) {
      ++compared;
      const SampleOutput& c = cpu.outputs[r];
      const SampleOutput& g = gpu.outputs[r];
      token_mismatches += c.token != g.token || c.status != g.status;
      if (batch.rows[r].want_logprob && c.status == kSampleOk) {
        worst_logprob = std::max(worst_logprob, static_cast<double>(std::fabs(c.logprob - g.logprob)));
      }
      for (int32_t k = 0; k < batch.rows[r].top_logprobs && c.status == kSampleOk; ++k) {
        const TokenLogprob a = cpu.row_top(r, batch.rows[r].top_logprobs)[k];
        const TokenLogprob b = gpu.row_top(r, batch.rows[r].top_logprobs)[k];
        top_id_mismatches += a.token != b.token;
        worst_logprob = std::max(worst_logprob, static_cast<double>(std::fabs(a.logprob - b.logprob)));
      }
    }
  }
  std::printf("  sample batch: %lld rows, %lld token mismatches, %lld top-N id mismatches, %lld logits not restored, "
              "worst logprob difference %.3g\n",
              static_cast<long long>(compared), static_cast<long long>(token_mismatches),
              static_cast<long long>(top_id_mismatches), static_cast<long long>(restored_mismatches), worst_logprob);
  expect(token_mismatches == 0, "sample batch: tokens equal the CPU's");
  expect(top_id_mismatches == 0, "sample batch: top-N ids equal the CPU's");
  expect(restored_mismatches == 0, "sample batch: logits restored after the edits");
  expect(worst_logprob <= 1e-4, "sample batch: logprobs within 1e-4 of the CPU's");
}

// Structured output's masks (SampleBatch::masks): a row may allow only a handful of a 151,936-token
// vocabulary (JSON punctuation) or all but a few thousand (inside a string), beside unmasked rows
// and the rows' own edits. The GPU must pick the CPU's token, always an allowed one, and leave the
// logits as they were.
void compare_masks_with_cpu(CudaSampler& sampler) {
  const int32_t vocab = 151936, rows = 18;
  const int32_t words = token_mask_words(vocab);
  const std::vector<float> logits = make_logits(rows, vocab, 777u);
  SampleBatch batch;
  batch.edit_offsets.push_back(0);
  std::mt19937 rng(99);
  for (int32_t r = 0; r < rows; ++r) {
    batch.rows.push_back(make_row(kNumParamSets, r, vocab));
    // An edit on a token that may or may not be allowed: the mask wins over its bias.
    batch.edits.push_back(LogitEdit{.token = static_cast<int32_t>(rng() % vocab), .bias = 30.0f});
    batch.edit_offsets.push_back(static_cast<int32_t>(batch.edits.size()));
    if (r % 3 == 2) {
      batch.mask_rows.push_back(-1);
      continue;
    }
    batch.mask_rows.push_back(static_cast<int32_t>(batch.masks.size() / words));
    const bool few = r % 3 == 0;
    batch.masks.resize(batch.masks.size() + words, few ? 0 : ~TokenMaskWord{0});
    TokenMaskWord* mask = batch.masks.data() + batch.masks.size() - words;
    mask[words - 1] &= last_mask_word_bits(vocab);
    const int32_t flips = few ? 1 + r % 5 : 3000 + r;  // a few allowed, or a few thousand banned
    for (int32_t k = 0; k < flips; ++k) {
      const auto t = static_cast<int32_t>(rng() % vocab);
      mask[t / 64] ^= (few == !token_allowed(mask, t)) ? TokenMaskWord{1} << (t % 64) : 0;
    }
  }
  const BothSamples both = sample_both(sampler, logits, rows, vocab, batch);
  int64_t mismatches = 0, outside = 0;
  for (int32_t r = 0; r < rows; ++r) {
    const SampleOutput& c = both.cpu.outputs[r];
    const SampleOutput& g = both.gpu.outputs[r];
    mismatches += c.token != g.token || c.status != g.status;
    const std::span<const TokenMaskWord> mask = batch.row_mask(r, vocab);
    outside += !mask.empty() && !token_allowed(mask.data(), g.token);
  }
  std::printf("  masks: %d rows, %d masked, %lld token mismatches, %lld outside the allowed, %lld logits not restored\n",
              rows, batch.num_masks(vocab), static_cast<long long>(mismatches), static_cast<long long>(outside),
              static_cast<long long>(both.not_restored));
  expect(mismatches == 0, "masks: tokens equal the CPU's");
  expect(outside == 0, "masks: every masked row's token is an allowed one");
  expect(both.not_restored == 0, "masks: logits restored after the masks and edits");
}

// Issue 13: 256 random requests of tiny-llama through a KV pool that holds about three at once,
// against each run alone (tests/support/soak.hpp). Preempted requests are recomputed; their outputs
// must still equal running alone, bit for bit.
void check_soak_on_cuda() {
  const ModelDef& model = models::tiny_llama::model_def();
  const test::SoakReport r = test::run_soak(model, 256, 2024, [&](int32_t kv_pages) {
    return make_cuda_backend(model, WeightOrigin{nullptr, 11}, BackendOptions{.kv_pages = kv_pages});
  });
  std::printf("%s\n", r.summary().c_str());
  for (const std::string& d : r.differences) std::printf("  %s\n", d.c_str());
  expect(r.finished == r.requests && r.finished_twice == 0, "soak: every request finished exactly once");
  expect(r.preemptions > 0, "soak: the small pool preempted");
  expect(r.pages_in_use_after == 0, "soak: every KV page is free after the run");
  expect(r.differing == 0, "soak: " + std::to_string(r.differing) + " outputs differ from running alone");
}

}  // namespace

TEST_CASE("philox4x32_10 on the device gives the known answers", "[sampler]") { check_philox_on_device(); }

TEST_CASE("sampling_exp is bit-identical on host and device", "[sampler]") { check_exp_bits_on_device(); }

TEST_CASE("the GPU sampler picks the CPU sampler's tokens", "[sampler]") {
  CudaSampler sampler(64);
  SamplerWorkspace tiny_slices(64, 4);  // splits even V = 7 over 2 blocks, V = 200 over 50
  compare_with_cpu({{"CudaSampler::sample", &sampler, nullptr},
                    {"launch_sampler, 4+ tokens per block", nullptr, &tiny_slices},
                    {"launch_sampler, one block per row", nullptr, nullptr}});
}

TEST_CASE("the GPU sampler's logit edits and logprobs equal the CPU's", "[sampler]") {
  CudaSampler sampler(64);
  compare_batches_with_cpu(sampler);
}

TEST_CASE("structured output's masks, allowing a handful of tokens or nearly all: the GPU picks the CPU's allowed token", "[sampler]") {
  CudaSampler sampler(64);
  compare_masks_with_cpu(sampler);
}

TEST_CASE("captured sampler launches replay with new rows", "[sampler]") {
  CudaSampler sampler(64);
  check_graph_capture(sampler.workspace());
}

// Timings, not a check: hidden from the default run (`test_serving_gpu "[.timing]"`).
TEST_CASE("sampler timings", "[.timing]") {
  CudaSampler sampler(64);
  time_sampler(sampler.workspace());
}

TEST_CASE("the serving soak on CUDA: 256 requests through a small KV pool, each as if alone", "[soak]") {
  check_soak_on_cuda();
}
