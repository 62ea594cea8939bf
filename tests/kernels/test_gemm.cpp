// cuBLASLt GemmRunner (prefill projections) against ref::linear in its three modes. Large products
// are checked on a sample of rows (the CPU reference would take minutes on all of them).
#include <algorithm>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/cuda/gemm.hpp"
#include "runtime/ref/ops.hpp"
#include "tests/kernels/test_groups.hpp"
#include "tests/support/gpu_harness.hpp"

namespace kiln::kernel_test {

namespace {

const char* mode_name(cuda::GemmOut mode) {
  switch (mode) {
    case cuda::GemmOut::store_bf16: return "store_bf16";
    case cuda::GemmOut::add_f32: return "add_f32";
    case cuda::GemmOut::store_f32: return "store_f32";
  }
  return "?";
}

void test_gemm(cuda::GemmRunner& runner, int rows, int n, int k, cuda::GemmOut mode) {
  std::mt19937 rng(11000 + rows + n + k);
  const bool bf16_out = mode == cuda::GemmOut::store_bf16;
  const auto in = random_bf16(static_cast<size_t>(rows) * k, rng);
  const auto weight = random_bf16(static_cast<size_t>(n) * k, rng);
  const auto residual = random_f32(static_cast<size_t>(rows) * n, rng, 10.0f);
  DeviceBuffer<uint16_t> d_in(in), d_weight(weight);
  DeviceBuffer<uint16_t> d_out_bf16(bf16_out ? static_cast<size_t>(rows) * n : 1);
  DeviceBuffer<float> d_out_f32(bf16_out ? 1 : static_cast<size_t>(rows) * n);
  void* out = bf16_out ? static_cast<void*>(d_out_bf16.get()) : static_cast<void*>(d_out_f32.get());
  if (mode == cuda::GemmOut::add_f32) {
    d_out_f32.upload(residual);
  } else {
    d_out_bf16.poison();
    d_out_f32.poison();
  }
  runner.run(as_bf16(d_in), as_bf16(d_weight), out, rows, n, k, mode, nullptr);
  KILN_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got_all = bf16_out ? bf16_to_f32(d_out_bf16.download()) : d_out_f32.download();

  // Rows to check: all of them up to 64, else 64 spread over the range (first and last included).
  std::vector<int> check_rows;
  const int samples = std::min(rows, 64);
  for (int i = 0; i < samples; ++i) check_rows.push_back(samples == 1 ? 0 : static_cast<int>(1LL * i * (rows - 1) / (samples - 1)));
  const auto in_f = bf16_to_f32(in), weight_f = bf16_to_f32(weight);
  std::vector<float> ref_in, ref, got;
  for (int r : check_rows) {
    ref_in.insert(ref_in.end(), in_f.begin() + static_cast<size_t>(r) * k, in_f.begin() + static_cast<size_t>(r + 1) * k);
    got.insert(got.end(), got_all.begin() + static_cast<size_t>(r) * n, got_all.begin() + static_cast<size_t>(r + 1) * n);
    if (mode == cuda::GemmOut::add_f32) {
      ref.insert(ref.end(), residual.begin() + static_cast<size_t>(r) * n, residual.begin() + static_cast<size_t>(r + 1) * n);
    }
  }
  ref.resize(got.size());
  ref::linear(ref_in.data(), samples, weight_f.data(), n, k, ref.data(), mode == cuda::GemmOut::add_f32);
  // Unchecked rows must still be written.
  long long nans = 0;
  for (float v : got_all) nans += v != v;
  const auto c = compare(ref, got);
  const std::string shape = "rows " + std::to_string(rows) + " N " + std::to_string(n) + " K " + std::to_string(k) +
                            " " + mode_name(mode);
  expect_close("gemm " + shape, c, bf16_out ? 5e-4 : 1e-5);
  expect(nans == 0, "gemm " + shape + ": " + std::to_string(nans) + " NaN (unwritten) outputs");
  const double us = median_us([&](int) { runner.run(as_bf16(d_in), as_bf16(d_weight), out, rows, n, k, mode, nullptr); });
  report("gemm", shape, c.nmse, us, 0, 2.0 * rows * n * k);
}

}  // namespace

void run_gemm_tests() {
  cuda::GemmRunner runner;
  for (int rows : {1, 17, 2048}) {
    test_gemm(runner, rows, 3072, 2048, cuda::GemmOut::store_bf16);  // Llama-3.2-1B qkv
    test_gemm(runner, rows, 2048, 8192, cuda::GemmOut::add_f32);     // down_proj
    test_gemm(runner, rows, 16384, 2048, cuda::GemmOut::store_bf16); // gate_up
    test_gemm(runner, rows, 960, 576, cuda::GemmOut::store_bf16);    // SmolLM2 qkv
  }
  test_gemm(runner, 1, 128256, 2048, cuda::GemmOut::store_f32);  // lm_head
  test_gemm(runner, 64, 128256, 2048, cuda::GemmOut::store_f32);
  test_gemm(runner, 333, 200, 144, cuda::GemmOut::add_f32);      // odd
  test_gemm(runner, 5, 1000, 200, cuda::GemmOut::store_f32);

  // Zero rows: nothing to do, no error. Bad sizes: kiln::Error naming them.
  runner.run(nullptr, nullptr, nullptr, 0, 64, 64, cuda::GemmOut::store_bf16, nullptr);
  bool threw = false;
  try {
    runner.run(nullptr, nullptr, nullptr, 4, -1, 64, cuda::GemmOut::store_bf16, nullptr);
  } catch (const Error& e) {
    threw = std::string(e.what()).find("n=-1") != std::string::npos;
  }
  expect(threw, "gemm with n = -1 throws kiln::Error naming the shape");
}

}  // namespace kiln::kernel_test
