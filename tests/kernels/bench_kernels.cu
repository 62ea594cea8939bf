// bench_kernels: decode GEMV bandwidth (bf16 rows, and Q4_0 / Q8_0 / Q4_K blocks) against the device-to-device
// copy bandwidth at the shapes that decide decode latency, for 1, 4, 16 and 64 tokens; a sweep of GEMV launch geometries (to
// choose the defaults in linear.cuh); decode and prefill attention at realistic sizes. Inputs rotate
// over copies larger than L2, so the numbers are DRAM numbers. No correctness checks here
// (test_kernels_gpu has them). Exits 77 without a GPU.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/model/rope_table.hpp"
#include "runtime/weights/quant_repack.hpp"
#include "templates/attention.cuh"
#include "templates/linear.cuh"
#include "templates/mla_attention_expanded.cuh"
#include "templates/moe_down.cuh"
#include "templates/moe_gate_up.cuh"
#include "templates/prep_attention.cuh"
#include "templates/rmsnorm.cuh"
#include "templates/silu_mul.cuh"
#include "templates/weight_matrix.hpp"
#include "tests/support/gpu_harness.hpp"

namespace kiln::kernel_test {
namespace {

double g_copy_gbps = 0.0;
constexpr int kSms = 132;  // H100 / H200: the generated models' kTargetSms

// Weights (in copies beyond L2), inputs and outputs for one GEMV shape.
template <int kN, int kK>
struct GemvData {
  static constexpr size_t kWeightElems = static_cast<size_t>(kN) * kK;
  std::mt19937 rng{kN + kK};
  RotatingWeights weights{DeviceBuffer<uint16_t>(random_bf16(kWeightElems, rng))};
  DeviceBuffer<uint16_t> in{random_bf16(static_cast<size_t>(64) * kK, rng)};
  DeviceBuffer<float> out{static_cast<size_t>(64) * kN};
  DeviceBuffer<float> scratch{static_cast<size_t>(std::max(1LL, gemv_scratch_floats(kN, kK, kSms, 64)))};  // wide plan
  const __nv_bfloat16* weight(int i) const { return weights.at(i); }
  double bytes(int tokens) const { return kWeightElems * 2.0 + tokens * (kK * 2.0 + kN * 4.0); }
};

void print_gemv_row(const std::string& shape, const std::string& variant, int tokens, double us, double bytes) {
  const double gbps = bytes / (us * 1e-6) / 1e9;
  std::printf("%-22s %-26s %6d %10.2f %10.1f %7.1f%%\n", shape.c_str(), variant.c_str(), tokens, us, gbps,
              100.0 * gbps / g_copy_gbps);
  std::fflush(stdout);
}

template <int kN, int kK>
void bench_gemv_default(const GemvData<kN, kK>& data) {
  const std::string shape = std::to_string(kK) + " -> " + std::to_string(kN);
  for (int tokens : {1, 4, 16, 64}) {
    const double us = median_us([&](int i) {
      kiln::linear<shape::linear{.n = kN, .k = kK, .out = LinearOut::store_f32, .sms = kSms}>(
          as_bf16(data.in), data.weight(i), data.out.get(), tokens, data.scratch.get(), nullptr);
    });
    print_gemv_row(shape, "default", tokens, us, data.bytes(tokens));
  }
}

template <int kN, int kK, int kTiles, int kWarpsN, int kWarpsK, int kUnroll>
void bench_gemv_variant(const GemvData<kN, kK>& data, int tokens) {
  using Shape = detail::GemvShape<kN, kK, kSms, kTiles, false, kWarpsN, kWarpsK, kUnroll>;
  const double us = median_us([&](int i) {
    detail::launch_gemv_input<kN, kK, LinearOut::store_f32, Shape>(
        detail::Bf16Input<kK, Shape::kVec>{as_bf16(data.in)}, data.weight(i), data.out.get(), nullptr, tokens, nullptr);
  });
  char variant[64];
  std::snprintf(variant, sizeof variant, "wn %d wk %d unroll %d (%d blk)", Shape::kWarpsN, Shape::kWarpsK,
                Shape::kUnroll, Shape::kRowBlocks);
  print_gemv_row(std::to_string(kK) + " -> " + std::to_string(kN), variant, tokens, us, data.bytes(tokens));
}

// Alternative geometries for one token count (tile count kTiles covers it).
template <int kN, int kK, int kTiles>
void sweep_gemv(const GemvData<kN, kK>& data, int tokens) {
  bench_gemv_variant<kN, kK, kTiles, 1, 4, detail::max_int(1, 4 / kTiles)>(data, tokens);
  bench_gemv_variant<kN, kK, kTiles, 1, 8, detail::max_int(1, 4 / kTiles)>(data, tokens);
  bench_gemv_variant<kN, kK, kTiles, 1, 16, detail::max_int(1, 4 / kTiles)>(data, tokens);
  bench_gemv_variant<kN, kK, kTiles, 1, 8, 1>(data, tokens);
  bench_gemv_variant<kN, kK, kTiles, 1, 8, 2>(data, tokens);
  bench_gemv_variant<kN, kK, kTiles, 2, 4, detail::max_int(1, 4 / kTiles)>(data, tokens);
  bench_gemv_variant<kN, kK, kTiles, 4, 2, detail::max_int(1, 4 / kTiles)>(data, tokens);
  bench_gemv_variant<kN, kK, kTiles, 4, 4, detail::max_int(1, 4 / kTiles)>(data, tokens);
  bench_gemv_variant<kN, kK, kTiles, 8, 1, detail::max_int(1, 4 / kTiles)>(data, tokens);
}

template <int kN, int kK, bool kSweep>
void bench_gemv_shape(bool sweep) {
  GemvData<kN, kK> data;
  bench_gemv_default(data);
  if constexpr (kSweep) {
    if (!sweep) return;
    sweep_gemv<kN, kK, 1>(data, 1);
    sweep_gemv<kN, kK, 2>(data, 16);
    sweep_gemv<kN, kK, 8>(data, 64);
  }
}

template <int kN, int kK, int kTiles, int kTilesPerWarp, int kBlockWarps, int kStages>
void bench_gemv_batched_variant(const GemvData<kN, kK>& data, int tokens) {
  using Shape = detail::BatchedGemvShape<kN, kK, kSms, kTiles, kTilesPerWarp, kBlockWarps, kStages>;
  const double us = median_us([&](int i) {
    detail::launch_gemv_batched<kN, kK, LinearOut::store_f32, kSms, kTiles, Shape>(as_bf16(data.in), data.weight(i),
                                                                                   data.out.get(), nullptr, tokens, nullptr);
  });
  char variant[64];
  std::snprintf(variant, sizeof variant, "batched tw %d w %d st %d (%d blk)", kTilesPerWarp, Shape::kWarps,
                Shape::kStages, Shape::kRowBlocks);
  print_gemv_row(std::to_string(kK) + " -> " + std::to_string(kN), variant, tokens, us, data.bytes(tokens));
}

// The batched GEMV's wide form at one geometry (row tiles a warp, warps a block, splits a block).
template <int kN, int kK, int kTiles, int kTilesPerWarp, int kBlockWarps, int kBlockWarpsK>
void bench_gemv_batched_wide_variant(const GemvData<kN, kK>& data, int tokens) {
  using Shape = detail::BatchedGemvShape<kN, kK, kSms, kTiles, kTilesPerWarp, kBlockWarps, 0, true, kBlockWarpsK>;
  const double us = median_us([&](int i) {
    detail::launch_gemv_batched<kN, kK, LinearOut::store_f32, kSms, kTiles, Shape>(
        as_bf16(data.in), data.weight(i), data.out.get(), data.scratch.get(), tokens, nullptr);
  });
  char variant[64];
  std::snprintf(variant, sizeof variant, "wide tw %d w %d wkb %d st %d (%dx%d)", kTilesPerWarp, Shape::kWarps,
                kBlockWarpsK, Shape::kStages, Shape::kRowBlocks, Shape::kGroups);
  print_gemv_row(std::to_string(kK) + " -> " + std::to_string(kN), variant, tokens, us, data.bytes(tokens));
}

// The narrow plan's input with every token's row read as token 0's (wrong sums: a timing probe,
// --small-batch): what the GEMV costs at 8 tokens when its input loads are those of one token.
template <int kK, int kVec>
struct BroadcastInput : detail::Bf16Input<kK, kVec> {
  using Row = typename detail::Bf16Input<kK, kVec>::Row;
  template <int kTiles, int kThreads>
  __device__ __forceinline__ void rows(int, int, Row (&rows)[kTiles]) const {
#pragma unroll
    for (int j = 0; j < kTiles; ++j) rows[j] = this->in;
  }
};

// Batch 8 against batch 1 on one shape (--small-batch), three rounds: the default, unrolls 2 and 4
// and twice the row tiles a block at both (the same sums), each at 1 and 8 tokens, and the input
// loads of one token at 8 (BroadcastInput).
template <int kN, int kK>
void bench_gemv_small_batch() {
  GemvData<kN, kK> data;
  const std::string shape = std::to_string(kK) + " -> " + std::to_string(kN);
  using Shape = detail::GemvShape<kN, kK, kSms, 1>;
  for (int round = 0; round < 3; ++round) {
    for (int tokens : {1, 8}) {
      const double us = median_us([&](int i) {
        kiln::linear<shape::linear{.n = kN, .k = kK, .out = LinearOut::store_f32, .sms = kSms}>(
            as_bf16(data.in), data.weight(i), data.out.get(), tokens, data.scratch.get(), nullptr);
      });
      print_gemv_row(shape, "default (unroll " + std::to_string(Shape::kUnroll) + ")", tokens, us, data.bytes(tokens));
      bench_gemv_variant<kN, kK, 1, Shape::kWarpsN, Shape::kWarpsK, 2>(data, tokens);
      bench_gemv_variant<kN, kK, 1, Shape::kWarpsN, Shape::kWarpsK, 4>(data, tokens);
      // Twice the row tiles a block (the same sums): its warps on one column step share the inputs in L1.
      if constexpr (Shape::kWarpsN * Shape::kWarpsK * 2 <= 32) {
        bench_gemv_variant<kN, kK, 1, Shape::kWarpsN * 2, Shape::kWarpsK, 2>(data, tokens);
        bench_gemv_variant<kN, kK, 1, Shape::kWarpsN * 2, Shape::kWarpsK, 4>(data, tokens);
      }
    }
    const double us = median_us([&](int i) {
      detail::launch_gemv_input<kN, kK, LinearOut::store_f32, Shape>(BroadcastInput<kK, Shape::kVec>{{as_bf16(data.in)}},
                                                                     data.weight(i), data.out.get(), nullptr, 8, nullptr);
    });
    print_gemv_row(shape, "token 0's loads (probe)", 8, us, data.bytes(8));
  }
}

// Other geometries of the batched GEMV beside the chosen one.
template <int kN, int kK, int kTiles>
void bench_gemv_batched_variants(const GemvData<kN, kK>& data, int tokens) {
  bench_gemv_batched_variant<kN, kK, kTiles, 2, 16, 0>(data, tokens);
  bench_gemv_batched_variant<kN, kK, kTiles, 1, 16, 0>(data, tokens);
  bench_gemv_batched_variant<kN, kK, kTiles, 1, 24, 0>(data, tokens);
}

// The narrow / wide plan's kernel for a pass of kTiles token tiles, on weight copy i: what linear<>
// took before the batched GEMV (the same bits).
template <int kN, int kK, int kTiles>
constexpr bool kPlainWide = gemv_plan(kN, kK, kSms).wide && kTiles >= detail::kGemvWideTokenTiles;

template <int kN, int kK, int kTiles>
void launch_plain_gemv(const GemvData<kN, kK>& data, int i, int tokens) {
  using Shape = detail::GemvShape<kN, kK, kSms, kTiles, kPlainWide<kN, kK, kTiles>>;
  detail::launch_gemv_input<kN, kK, LinearOut::store_f32, Shape>(detail::Bf16Input<kK, Shape::kVec>{as_bf16(data.in)},
                                                                 data.weight(i), data.out.get(), data.scratch.get(),
                                                                 tokens, nullptr);
}

// A batch's GEMV (9-64 tokens): the per-token-count kernel linear<> takes (the batched GEMV where
// it applies) beside the narrow / wide plan's kernel, which gives the same bits.
template <int kN, int kK, int kTiles>
void bench_gemv_batch(const GemvData<kN, kK>& data, int tokens) {
  const std::string shape = std::to_string(kK) + " -> " + std::to_string(kN);
  const double plain_us = median_us([&](int i) { launch_plain_gemv<kN, kK, kTiles>(data, i, tokens); });
  print_gemv_row(shape, kPlainWide<kN, kK, kTiles> ? "wide plan" : "narrow plan", tokens, plain_us, data.bytes(tokens));
  const double us = median_us([&](int i) {
    kiln::linear<shape::linear{.n = kN, .k = kK, .out = LinearOut::store_f32, .sms = kSms}>(
        as_bf16(data.in), data.weight(i), data.out.get(), tokens, data.scratch.get(), nullptr);
  });
  if constexpr (detail::use_batched_gemv_wide<kN, kK, kSms, kTiles>()) {
    using Wide = detail::BatchedGemvShape<kN, kK, kSms, kTiles, 0, 0, 0, true>;
    char chosen[64];
    std::snprintf(chosen, sizeof chosen, "wide: tw %d w %d wkb %d st %d", Wide::kTilesPerWarp, Wide::kWarps,
                  Wide::kBlockWarpsK, Wide::kStages);
    print_gemv_row(shape, chosen, tokens, us, data.bytes(tokens));
    // Other geometries of the wide form.
    bench_gemv_batched_wide_variant<kN, kK, kTiles, 1, 16, 1>(data, tokens);
    bench_gemv_batched_wide_variant<kN, kK, kTiles, 1, 8, 1>(data, tokens);
    bench_gemv_batched_wide_variant<kN, kK, kTiles, 2, 8, 1>(data, tokens);
    bench_gemv_batched_wide_variant<kN, kK, kTiles, 2, 16, 1>(data, tokens);
    bench_gemv_batched_wide_variant<kN, kK, kTiles, 1, 16, 2>(data, tokens);
    bench_gemv_batched_wide_variant<kN, kK, kTiles, 1, 8, 2>(data, tokens);
    bench_gemv_batched_wide_variant<kN, kK, kTiles, 1, 16, 4>(data, tokens);
  } else if constexpr (!detail::use_batched_gemv<kN, kK, kSms, kTiles>()) {
    print_gemv_row(shape, "default (same)", tokens, us, data.bytes(tokens));
  } else {
    using Batched = detail::BatchedGemvShape<kN, kK, kSms, kTiles>;
    char chosen[64];
    std::snprintf(chosen, sizeof chosen, "batched: tw %d w %d st %d", Batched::kTilesPerWarp, Batched::kWarps,
                  Batched::kStages);
    print_gemv_row(shape, chosen, tokens, us, data.bytes(tokens));
    bench_gemv_batched_variants<kN, kK, kTiles>(data, tokens);
  }
}

// For ncu (--ncu-batched): the narrow / wide plan's kernel and the batched one at 64 tokens, once each.
template <int kN, int kK>
void run_gemv_batch_once() {
  GemvData<kN, kK> data;
  constexpr int kTiles = 8;
  launch_plain_gemv<kN, kK, kTiles>(data, 0, 64);
  detail::launch_gemv_batched<kN, kK, LinearOut::store_f32, kSms, kTiles>(as_bf16(data.in), data.weight(1),
                                                                          data.out.get(), nullptr, 64, nullptr);
  KILN_CUDA_OK(cudaDeviceSynchronize());
}

template <int kN, int kK>
void bench_gemv_batches() {
  GemvData<kN, kK> data;
  bench_gemv_batch<kN, kK, 2>(data, 16);
  bench_gemv_batch<kN, kK, 4>(data, 32);
  bench_gemv_batch<kN, kK, 8>(data, 64);
}

// An [n, k] matrix in format F as copies beyond L2 (matrix i % copies for launch i), every byte 0x11:
// quants of every nibble, scales 0x1111 (finite).
template <MatrixFormat F>
struct RotatingQuantMatrix {
  long long bytes;  // one copy's, 256-byte aligned
  int copies;
  DeviceBuffer<std::byte> data;
  RotatingQuantMatrix(int n, int k)
      : bytes((matrix_bytes(F, n, k) + 255) / 256 * 256),
        copies(copies_beyond_l2(static_cast<size_t>(bytes))),
        data(static_cast<size_t>(bytes) * copies) {
    KILN_CUDA_OK(cudaMemset(data.get(), 0x11, data.size()));
  }
  const std::byte* raw(int i) const { return data.get() + (i % copies) * bytes; }
  GpuMatrix at(int i) const { return GpuMatrix{raw(i), F}; }
};

// An [n, k] matrix in two formats (GpuMatrix::split: rows [0, split) in F0, the rest in F1) as
// copies beyond L2, every byte 0x11 as RotatingQuantMatrix's.
template <MatrixFormat F0, MatrixFormat F1>
struct RotatingTwoFormatMatrix {
  int split;
  long long head_bytes, bytes;  // the first part's (256-byte aligned), one copy's
  int copies;
  DeviceBuffer<std::byte> data;
  RotatingTwoFormatMatrix(int n, int k, int split_row)
      : split(split_row),
        head_bytes((matrix_bytes(F0, split_row, k) + 255) / 256 * 256),
        bytes(head_bytes + (matrix_bytes(F1, n - split_row, k) + 255) / 256 * 256),
        copies(copies_beyond_l2(static_cast<size_t>(bytes))),
        data(static_cast<size_t>(bytes) * copies) {
    KILN_CUDA_OK(cudaMemset(data.get(), 0x11, data.size()));
  }
  GpuMatrix at(int i) const {
    const std::byte* raw = data.get() + (i % copies) * bytes;
    return GpuMatrix{.data = raw, .format = F0, .split = split, .tail = raw + head_bytes, .tail_format = F1};
  }
};

// Llama-3.1-8B's qkv_proj 6144×4096 at one token, chained (graph_us), as a Q4_K_M file holds it in
// 16 of its 32 layers (q and k Q4_K, v Q6_K): its two formats in one launch (the op), the same two
// parts in two launches, the whole matrix requantized to Q8_0 (what the loader kept before), and
// all of it Q4_K (a bound).
void bench_two_formats() {
  constexpr int kN = 6144, kK = 4096, kSplit = 5120;
  constexpr shape::linear kQkv{.n = kN, .k = kK, .out = LinearOut::store_bf16, .sms = kSms, .stacked = true};
  const RotatingTwoFormatMatrix<MatrixFormat::q4_k, MatrixFormat::q6_k> parts(kN, kK, kSplit);
  const RotatingQuantMatrix<MatrixFormat::q8_0> q8(kN, kK);
  const RotatingQuantMatrix<MatrixFormat::q4_k> q4k(kN, kK);
  std::mt19937 rng(kN);
  DeviceBuffer<uint16_t> in(random_bf16(kK, rng)), out(kN);
  const double one = graph_us([&](int i, cudaStream_t st) {
    linear<kQkv>(as_bf16(in), parts.at(i), as_bf16_mut(out), 1, nullptr, st);
  });
  const double two = graph_us([&](int i, cudaStream_t st) {
    const GpuMatrix m = parts.at(i);
    detail::linear_quant<kN, kK, LinearOut::store_bf16, MatrixFormat::q4_k>(
        as_bf16(in), m.data, as_bf16_mut(out), 1, st, detail::RuntimeRows{kSplit});
    detail::linear_quant<kN, kK, LinearOut::store_bf16, MatrixFormat::q6_k>(
        as_bf16(in), m.tail, as_bf16_mut(out) + kSplit, 1, st, detail::RuntimeRows{kN - kSplit});
  });
  // The one launch left to ptxas (it chose 4 blocks an SM, 64 registers, and spilled).
  const double one_free = graph_us([&](int i, cudaStream_t st) {
    using S0 = detail::QuantPassShape<kK, MatrixFormat::q4_k, 1, true>;
    using S1 = detail::QuantPassShape<kK, MatrixFormat::q6_k, 1, true>;
    constexpr auto kernel =
        detail::gemv_quant_parts_kernel<kN, kK, LinearOut::store_bf16, MatrixFormat::q4_k, S0, MatrixFormat::q6_k, S1, 0>;
    const GpuMatrix m = parts.at(i);
    KILN_LAUNCH(kernel, dim3(kN / 16), S0::kThreads, S0::kSharedRowBytes, st, as_bf16(in),
                static_cast<const unsigned char*>(m.data), static_cast<const unsigned char*>(m.tail), as_bf16_mut(out), 1,
                kSplit);
  });
  const double q8_0 = graph_us([&](int i, cudaStream_t st) {
    linear<kQkv>(as_bf16(in), q8.at(i), as_bf16_mut(out), 1, nullptr, st);
  });
  const double q4_k = graph_us([&](int i, cudaStream_t st) {
    linear<kQkv>(as_bf16(in), q4k.at(i), as_bf16_mut(out), 1, nullptr, st);
  });
  const double parts_bytes = matrix_bytes(parts.at(0), kN, kK);
  std::printf("qkv 6144x4096 Q4_K | Q6_K at row 5120 (%.1f MB): one launch %.2f us (%.0f GB/s), left to ptxas "
              "%.2f, two launches %.2f; all Q8_0 (%.1f MB) %.2f; all Q4_K (%.1f MB) %.2f\n",
              parts_bytes / 1e6, one, parts_bytes / one / 1e3, one_free, two,
              matrix_bytes(MatrixFormat::q8_0, kN, kK) / 1e6, q8_0, matrix_bytes(MatrixFormat::q4_k, kN, kK) / 1e6, q4_k);
  std::fflush(stdout);
}

// The GEMV over a GGUF block format (linear_quant.cuh) at one shape: the default geometry for 1, 4,
// 16 and 64 tokens, each launch alone; then for one token "chained", back to back in a CUDA graph
// (each launch overlapping the end of the one before, as a decode step's do), and with `sweep`
// other splits and unrolls, chained too. Bytes: the matrix's (ggml's bytes) plus the inputs and
// outputs.
template <int kN, int kK, MatrixFormat F, int kTiles, int kWarpsN, int kWarpsK, int kUnroll, int kShared = -1>
void bench_quant_variant(const RotatingQuantMatrix<F>& matrix, const DeviceBuffer<uint16_t>& in,
                         DeviceBuffer<float>& out, int tokens) {
  using Shape = detail::QuantGemvShape<kK, F, kTiles, kWarpsN, kWarpsK, kUnroll, kShared>;
  const double us = graph_us([&](int i, cudaStream_t stream) {
    detail::launch_gemv_quant<kN, kK, LinearOut::store_f32, F, Shape>(
        as_bf16(in), matrix.raw(i), out.get(), tokens, stream);
  });
  char variant[64];
  std::snprintf(variant, sizeof variant, "%s wn %d wk %d u %d %s", matrix_format_name(F), Shape::kWarpsN,
                Shape::kWarpsK, Shape::kUnroll, Shape::kSharedInput ? "shared" : "global");
  print_gemv_row(std::to_string(kK) + " -> " + std::to_string(kN), variant, tokens, us,
                 matrix_bytes(F, kN, kK) + tokens * (kK * 2.0 + kN * 4.0));
}

template <int kN, int kK, MatrixFormat F>
void bench_quant_shape(bool sweep) {
  const RotatingQuantMatrix<F> matrix(kN, kK);
  std::mt19937 rng(kN + kK);
  DeviceBuffer<uint16_t> in(random_bf16(static_cast<size_t>(64) * kK, rng));
  DeviceBuffer<float> out(static_cast<size_t>(64) * kN);
  const std::string shape = std::to_string(kK) + " -> " + std::to_string(kN);
  for (int tokens : {1, 4, 16, 64}) {
    const double us = median_us([&](int i) {
      kiln::linear<shape::linear{.n = kN, .k = kK, .out = LinearOut::store_f32, .sms = kSms}>(
          as_bf16(in), matrix.at(i), out.get(), tokens, nullptr, nullptr);
    });
    print_gemv_row(shape, std::string(matrix_format_name(F)) + " default", tokens, us,
                   matrix_bytes(F, kN, kK) + tokens * (kK * 2.0 + kN * 4.0));
  }
  const double chained = graph_us([&](int i, cudaStream_t stream) {
    kiln::linear<shape::linear{.n = kN, .k = kK, .out = LinearOut::store_f32, .sms = kSms}>(
        as_bf16(in), matrix.at(i), out.get(), 1, nullptr, stream);
  });
  print_gemv_row(shape, std::string(matrix_format_name(F)) + " chained", 1, chained,
                 matrix_bytes(F, kN, kK) + kK * 2.0 + kN * 4.0);
  if (!sweep) return;
  using Default = detail::QuantGemvShape<kK, F, 1>;
  constexpr int WK = Default::kWarpsK;               // the default split
  constexpr int SH = Default::kWholeGroups ? 1 : 0;  // shared inputs where it can
  bench_quant_variant<kN, kK, F, 1, 1, WK, 1, 0>(matrix, in, out, 1);
  bench_quant_variant<kN, kK, F, 1, 1, WK, 1, SH>(matrix, in, out, 1);
  bench_quant_variant<kN, kK, F, 1, 1, WK, 2, SH>(matrix, in, out, 1);
  bench_quant_variant<kN, kK, F, 1, 1, WK, 4, SH>(matrix, in, out, 1);
  bench_quant_variant<kN, kK, F, 1, 1, WK / 2, 2, SH>(matrix, in, out, 1);
  bench_quant_variant<kN, kK, F, 1, 1, 16, 1, SH>(matrix, in, out, 1);
  bench_quant_variant<kN, kK, F, 1, 1, 16, 2, SH>(matrix, in, out, 1);
  bench_quant_variant<kN, kK, F, 1, 1, 32, 1, SH>(matrix, in, out, 1);  // 1024 threads a block
}

// Llama-3.1-8B's qkv, gate_up and down_proj in format F.
template <MatrixFormat F>
void bench_8b_projections(bool sweep) {
  bench_quant_shape<6144, 4096, F>(sweep);
  bench_quant_shape<28672, 4096, F>(sweep);
  bench_quant_shape<4096, 14336, F>(sweep);
}

// The paged KV caches of a decode step's batch of equal contexts, one copy a layer, as many layers
// as it takes to read beyond L2 (rotate with layer(i)); the pages of each sequence shuffled.
struct DecodeCaches {
  int pages_per_seq;
  size_t layer_elems;
  int layers;
  DeviceBuffer<uint16_t> cache;
  std::vector<int> tables;  // [batch][pages_per_seq] page ids
  DeviceBuffer<int> d_tables, d_ctx;
  double kv_bytes;          // the keys and values a step reads

  DecodeCaches(int batch, int context, int kv_heads, int head_dim, int page_size, std::mt19937& rng)
      : pages_per_seq((context + page_size - 1) / page_size),
        layer_elems(static_cast<size_t>(batch) * pages_per_seq * 2 * kv_heads * page_size * head_dim),
        layers(copies_beyond_l2(layer_elems * 2)),
        cache(layer_elems * layers),
        tables(shuffled_pages(static_cast<size_t>(batch) * pages_per_seq, rng)),
        d_tables(tables),
        d_ctx(std::vector<int>(batch, context)),
        kv_bytes(2.0 * batch * context * kv_heads * head_dim * 2) {
    KILN_CUDA_OK(cudaMemset(cache.get(), 0x3c, cache.size() * 2));  // finite bf16 values
  }
  __nv_bfloat16* layer(int i) { return as_bf16_mut(cache) + layer_elems * (i % layers); }

  static std::vector<int> shuffled_pages(size_t count, std::mt19937& rng) {
    std::vector<int> ids(count);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    return ids;
  }
};

// Decode attention of a batch of equal contexts, rotating over layer caches beyond L2.
template <int kHeads, int kKvHeads, int kHeadDim, int kPageSize, int kPartition, int kMaxPartitions>
void bench_decode(int batch, int context) {
  constexpr int kRow = (kHeads + 2 * kKvHeads) * kHeadDim;
  std::mt19937 rng(batch + context);
  DecodeCaches kv(batch, context, kKvHeads, kHeadDim, kPageSize, rng);
  DeviceBuffer<uint16_t> q(random_bf16(static_cast<size_t>(batch) * kRow, rng)),
      out(static_cast<size_t>(batch) * kHeads * kHeadDim);
  constexpr shape::attention kShape{.heads = kHeads, .kv_heads = kKvHeads, .head_dim = kHeadDim, .page_size = kPageSize,
                                    .row = kRow, .scale = 0.125f, .partition = kPartition,
                                    .max_partitions = kMaxPartitions};
  DeviceBuffer<float> scratch(static_cast<size_t>(attention_decode_scratch_floats<kShape>(batch)));
  const double us = median_us([&](int i) {
    kiln::attention_decode<kShape>(as_bf16(q), kv.layer(i), as_bf16_mut(out), kv.d_ctx.get(), kv.d_tables.get(),
                                   kv.pages_per_seq, batch, scratch.get(), nullptr);
  });
  const double gbps = kv.kv_bytes / (us * 1e-6) / 1e9;
  std::printf("decode attention %2d/%d x %3d page %2d part %4d  batch %3d ctx %5d %10.2f us %9.1f GB/s %6.1f%%\n",
              kHeads, kKvHeads, kHeadDim, kPageSize, kPartition, batch, context, us, gbps, 100.0 * gbps / g_copy_gbps);
  std::fflush(stdout);
}

// The decode's attention op, prep_attention (q's RoPE, the new token's k and v into the cache,
// split-KV attention, the merge), for a batch of equal contexts, rotating over layer caches beyond
// L2, the grid's partition slots sized from the GPU (as the decode runs it): the build the decode
// chooses, and each build forced (one block an SM, registers unbounded; two, 128 registers).
// Bytes: the keys and values read.
template <int kHeads, int kKvHeads, int kHeadDim, int kPageSize, int kPartition, int kMaxPartitions>
void bench_prep_attention(int batch, int context) {
  constexpr int kRow = (kHeads + 2 * kKvHeads) * kHeadDim;
  constexpr shape::prep_attention kShape{.heads = kHeads, .kv_heads = kKvHeads, .head_dim = kHeadDim, .row = kRow,
                                         .page_size = kPageSize, .qk_norm = false, .eps = 1e-5f, .scale = 0.125f,
                                         .partition = kPartition, .max_partitions = kMaxPartitions};
  std::mt19937 rng(batch * 7 + context);
  DecodeCaches kv(batch, context, kKvHeads, kHeadDim, kPageSize, rng);
  // Each sequence's new token at position context - 1, in its last page.
  const int pos = context - 1;
  std::vector<int> slots(batch);
  for (int s = 0; s < batch; ++s) {
    slots[s] = kv.tables[static_cast<size_t>(s) * kv.pages_per_seq + pos / kPageSize] * kPageSize + pos % kPageSize;
  }
  DeviceBuffer<int> d_pos(std::vector<int>(batch, pos)), d_slots(slots);
  DeviceBuffer<float> d_rope(build_rope_table(RopeInfo{.theta = 500000.0, .rotary_dim = kHeadDim}, context));
  DeviceBuffer<uint16_t> qkv(random_bf16(static_cast<size_t>(batch) * kRow, rng)),
      out(static_cast<size_t>(batch) * kHeads * kHeadDim);
  DeviceBuffer<float> scratch(static_cast<size_t>(prep_attention_scratch_floats<kShape>(batch)));
  DeviceBuffer<unsigned> counters(std::vector<unsigned>(static_cast<size_t>(batch) * kKvHeads, 0u));
  for (const int blocks_per_sm : {0, 1, 2, 4}) {
    const double us = median_us([&](int i) {
      kiln::prep_attention<kShape>(as_bf16(qkv), nullptr, nullptr, d_pos.get(), d_rope.get(), d_slots.get(),
                                   kv.layer(i), as_bf16_mut(out), kv.d_ctx.get(), kv.d_tables.get(),
                                   kv.pages_per_seq, batch, scratch.get(), counters.get(), nullptr, 0, blocks_per_sm);
    });
    const double gbps = kv.kv_bytes / (us * 1e-6) / 1e9;
    const char* build = blocks_per_sm == 0   ? "chosen"
                        : blocks_per_sm == 1 ? "1 an SM"
                        : blocks_per_sm == 2 ? "2 an SM"
                                             : "4 an SM";
    std::printf("prep_attention %2d/%d x %3d part %4d build %-7s batch %3d ctx %5d %10.2f us %9.1f GB/s %6.1f%%\n",
                kHeads, kKvHeads, kHeadDim, kPartition, build, batch, context, us, gbps, 100.0 * gbps / g_copy_gbps);
  }
  std::fflush(stdout);
}

// Llama-3.1-8B's and Llama-3.2-1B's decode attention (--decode-attention): batch 1, 8 and 64 at a
// short context (a chat's first replies) and at longer ones; with only_256 (--decode-attention-256)
// the batches of 256 alone.
void bench_prep_attentions(bool only_256) {
  if (!only_256) {
    for (const int batch : {1, 8, 64}) {
      for (const int context : {96, 1024, 8000}) {
        if (batch * context > 64 * 1024) continue;  // the caches beyond L2 stay within memory
        bench_prep_attention<32, 8, 128, 16, 512, 16>(batch, context);
        bench_prep_attention<32, 8, 64, 16, 512, 16>(batch, context);
      }
    }
    // The 8B built for 32k tokens (65 partitions): one sequence at 32,000.
    // (At 32,000 tokens its partitions grow to 1,024 keys: split_kv_partition_keys.)
    bench_prep_attention<32, 8, 128, 16, 512, 65>(1, 32000);
  }
  // 256 short sequences.
  bench_prep_attention<32, 8, 128, 16, 512, 16>(256, 160);
  bench_prep_attention<32, 8, 64, 16, 512, 16>(256, 160);   // Llama-3.2-1B's heads
  bench_prep_attention<16, 8, 128, 16, 512, 16>(256, 160);  // Qwen3-0.6B's
}

// Prefill attention of one causal prompt: the kernel attention_prefill chooses, and, beside it, the
// mma.sync kernel (the pre-Hopper path) launched directly.
template <int kHeads, int kKvHeads, int kHeadDim, int kPageSize>
void bench_prefill(int tokens) {
  constexpr int kRow = (kHeads + 2 * kKvHeads) * kHeadDim;
  std::mt19937 rng(tokens);
  const int pages = (tokens + kPageSize - 1) / kPageSize;
  DeviceBuffer<uint16_t> cache(random_bf16(static_cast<size_t>(pages) * 2 * kKvHeads * kPageSize * kHeadDim, rng));
  std::vector<int> table(pages);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<int> positions(tokens);
  std::iota(positions.begin(), positions.end(), 0);
  DeviceBuffer<int> d_table(table), d_pos(positions), d_qs(std::vector<int>{0, tokens});
  DeviceBuffer<uint16_t> q(random_bf16(static_cast<size_t>(tokens) * kRow, rng)),
      out(static_cast<size_t>(tokens) * kHeads * kHeadDim);
  constexpr shape::attention kShape{.heads = kHeads, .kv_heads = kKvHeads, .head_dim = kHeadDim, .page_size = kPageSize,
                                    .row = kRow, .scale = 0.125f, .partition = 512, .max_partitions = 1};
  const double flops = 4.0 * kHeads * kHeadDim * (static_cast<double>(tokens) * (tokens + 1) / 2);
  const int reps = tokens >= 16384 ? 5 : 20;
  const double us = median_us([&](int) {
    kiln::attention_prefill<kShape>(as_bf16(q), as_bf16(cache), as_bf16_mut(out), d_qs.get(), d_pos.get(),
                                    d_table.get(), pages, 1, tokens, nullptr);
  }, 3, reps);
  const detail::PagedKv<kKvHeads, kHeadDim, kPageSize> kv{as_bf16(cache), d_table.get(), pages};
  const double mma_us = median_us([&](int) {
    detail::launch_prefill_mma<kHeads, kKvHeads, kHeadDim, kHeadDim, kRow>(as_bf16(q), kv, as_bf16_mut(out), d_qs.get(),
                                                                           d_pos.get(), 1, tokens, 0.125f, nullptr);
  }, 3, reps);
  std::printf(
      "prefill attention %2d/%d x %3d page %2d  tokens %5d %10.2f us %8.1f TFLOP/s   mma.sync %10.2f us %8.1f TFLOP/s\n",
      kHeads, kKvHeads, kHeadDim, kPageSize, tokens, us, flops / (us * 1e-6) / 1e12, mma_us,
      flops / (mma_us * 1e-6) / 1e12);
  std::fflush(stdout);
}

// MLA's prefill attention over expanded keys and values (DeepSeek-V2-Lite's heads: q·k over 192,
// v 128) for one causal prompt, the workspace filled at random; the gather and the two expansion
// GEMMs (cuBLASLt) are not timed. TFLOP/s count 2 · (192 + 128) · heads per (query, key) pair.
constexpr shape::mla_attention_expanded kBenchMlaExpanded{.heads = 16, .nope = 128, .rope = 64, .latent = 512,
                                                          .v = 128, .page_size = 16, .scale = 0.1147f, .keys = 32768};

void bench_mla_expanded(int tokens) {
  using Workspace = kiln::MlaExpanded<kBenchMlaExpanded>;
  constexpr int kHeads = kBenchMlaExpanded.heads, kNope = kBenchMlaExpanded.nope, kRope = kBenchMlaExpanded.rope;
  constexpr int kV = kBenchMlaExpanded.v, kRow = kHeads * (kNope + kRope);
  std::mt19937 rng(tokens);
  DeviceBuffer<uint16_t> workspace(random_bf16(static_cast<size_t>(tokens) * Workspace::kValuesPerKey, rng));
  // The regions of a workspace of `tokens` keys (the kernel reads those rows only).
  Workspace w(as_bf16_mut(workspace));
  w.k_rope = w.c_kv + static_cast<size_t>(tokens) * kBenchMlaExpanded.latent;
  w.k_nope = w.k_rope + static_cast<size_t>(tokens) * kRope;
  w.v = w.k_nope + static_cast<size_t>(tokens) * kHeads * kNope;
  std::vector<int> positions(tokens);
  std::iota(positions.begin(), positions.end(), 0);
  DeviceBuffer<int> d_pos(positions), d_qs(std::vector<int>{0, tokens}), d_ctx(std::vector<int>{tokens});
  DeviceBuffer<uint16_t> q(random_bf16(static_cast<size_t>(tokens) * kRow, rng, 0.5f)),
      out(static_cast<size_t>(tokens) * kHeads * kV);
  const double flops = 2.0 * (kNope + kRope + kV) * kHeads * (static_cast<double>(tokens) * (tokens + 1) / 2);
  const double us = median_us([&](int) {
    kiln::mla_expanded_attention<kBenchMlaExpanded>(as_bf16(q), w, as_bf16_mut(out), d_qs.get(), d_pos.get(),
                                                    d_ctx.get(), 1, tokens, nullptr);
  }, 3, tokens >= 16384 ? 5 : 20);
  std::printf("mla expanded attention %d x %d/%d  tokens %5d %10.2f us %8.1f TFLOP/s\n", kHeads, kNope + kRope, kV,
              tokens, us, flops / (us * 1e-6) / 1e12);
  std::fflush(stdout);
}

void bench_prefills() {
  bench_mla_expanded(2048);
  bench_mla_expanded(8192);
  bench_prefill<32, 8, 64, 16>(2048);
  bench_prefill<32, 8, 64, 16>(8192);
  bench_prefill<16, 8, 128, 16>(2048);
  bench_prefill<9, 3, 64, 16>(2048);
  bench_prefill<32, 8, 128, 16>(2048);  // Llama-3.1-8B
  bench_prefill<32, 8, 128, 16>(8192);
  bench_prefill<32, 8, 128, 16>(32768);
}

// The routed experts' prefill GEMMs at a model's shapes: `tokens` tokens routed uniformly at random,
// moe_gate_up_prefill and moe_down_prefill (wgmma tiles on Hopper) beside the mma.sync tile GEMM
// launched directly. TFLOP/s count 2 · pairs · N · K.
template <int kExperts, int kTopK, int kHidden, int kInter>
void bench_moe_prefill(int tokens) {
  constexpr shape::moe_gate_up G{.experts = kExperts, .top_k = kTopK, .hidden = kHidden, .inter = kInter, .sms = kSms};
  constexpr shape::moe_down D{.experts = kExperts, .top_k = kTopK, .hidden = kHidden, .inter = kInter, .sms = kSms};
  std::mt19937 rng(kExperts + kHidden);
  const int pairs = tokens * kTopK;
  std::vector<int> ids;
  for (int t = 0; t < tokens; ++t) {
    std::vector<int> order(kExperts);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    ids.insert(ids.end(), order.begin(), order.begin() + kTopK);
  }
  DeviceBuffer<uint16_t> gate_up(random_bf16(static_cast<size_t>(kExperts) * 2 * kInter * kHidden, rng, 0.02f));
  DeviceBuffer<uint16_t> down(random_bf16(static_cast<size_t>(kExperts) * kHidden * kInter, rng, 0.02f));
  DeviceBuffer<uint16_t> h(random_bf16(static_cast<size_t>(tokens) * kHidden, rng));
  DeviceBuffer<uint16_t> act(random_bf16(static_cast<size_t>(pairs) * kInter, rng));
  DeviceBuffer<uint16_t> out(static_cast<size_t>(pairs) * 2 * kInter);
  DeviceBuffer<int> d_ids(ids), scratch(static_cast<size_t>(tokens) * moe_scratch_ints_per_token<G>());
  DeviceBuffer<float> weights(std::vector<float>(pairs, 0.5f)), x(random_f32(static_cast<size_t>(tokens) * kHidden, rng));
  DeviceBuffer<uint16_t> pair_out(static_cast<size_t>(pairs) * kHidden);
  moe_gate_up_prefill<G>(as_bf16(h), as_bf16(gate_up), d_ids.get(), as_bf16_mut(out), scratch.get(), tokens, nullptr);
  const double up_flop = 2.0 * pairs * 2 * kInter * kHidden, down_flop = 2.0 * pairs * kHidden * kInter;
  auto row = [&](const char* what, double flop, double us, double mma_us) {
    std::printf("moe prefill %3d/%d %5d x %5d %-8s tokens %5d %9.2f us %7.1f TFLOP/s   mma.sync %9.2f us %7.1f TFLOP/s\n",
                kExperts, kTopK, kHidden, kInter, what, tokens, us, flop / us / 1e6, mma_us, flop / mma_us / 1e6);
    std::fflush(stdout);
  };
  // The buckets stay in scratch from the call above; gate_up's time includes its own bucketing.
  const double up_us = median_us([&](int) {
    moe_gate_up_prefill<G>(as_bf16(h), as_bf16(gate_up), d_ids.get(), as_bf16_mut(out), scratch.get(), tokens, nullptr);
  });
  using UpP = detail::MoeGateUpGemm<kExperts, kTopK, kHidden, kInter>;
  const double up_mma_us = median_us([&](int) {
    detail::launch_tile_gemm<UpP, 128>(typename UpP::Args{as_bf16(h), as_bf16(gate_up), scratch.get(), as_bf16_mut(out)},
                                       dim3(detail::ceil_div(UpP::kN, 128), detail::expert_tile_bound<kExperts, kTopK>(tokens)),
                                       nullptr);
  });
  row("gate_up", up_flop, up_us, up_mma_us);
  // The fused op (silu(gate) ⊙ up in the epilogue) beside the two ops it replaces.
  constexpr shape::moe_gate_up_act A{.experts = kExperts, .top_k = kTopK, .hidden = kHidden, .inter = kInter, .sms = kSms};
  const double act_us = median_us([&](int) {
    moe_gate_up_act_prefill<A>(as_bf16(h), as_bf16(gate_up), d_ids.get(), as_bf16_mut(out), as_bf16_mut(act),
                               scratch.get(), tokens, nullptr);
  });
  const double parts_us = median_us([&](int) {
    moe_gate_up_prefill<G>(as_bf16(h), as_bf16(gate_up), d_ids.get(), as_bf16_mut(out), scratch.get(), tokens, nullptr);
    silu_mul<shape::silu_mul{.dim = kInter}>(as_bf16(out), as_bf16_mut(act), pairs, nullptr);
  });
  std::printf("moe prefill %3d/%d %5d x %5d gate_up_act tokens %5d %9.2f us %7.1f TFLOP/s   gate_up + silu_mul %9.2f us\n",
              kExperts, kTopK, kHidden, kInter, tokens, act_us, up_flop / act_us / 1e6, parts_us);
  std::fflush(stdout);
  const double down_us = median_us([&](int) {
    moe_down_prefill<D>(as_bf16(act), as_bf16(down), d_ids.get(), weights.get(), scratch.get(), as_bf16_mut(pair_out), nullptr,
                        x.get(), tokens, nullptr);
  });
  using DownP = detail::MoeDownPairsGemm<kExperts, kTopK, kHidden, kInter>;
  const double down_mma_us = median_us([&](int) {
    detail::launch_tile_gemm<DownP, 128>(
        typename DownP::Args{as_bf16(act), as_bf16(down), scratch.get(), as_bf16_mut(pair_out)},
        dim3(detail::ceil_div(kHidden, 128), detail::expert_tile_bound<kExperts, kTopK>(tokens)), nullptr);
  });
  row("down", down_flop, down_us, down_mma_us);  // (moe_down_prefill's time includes its per-token sum)
}

void bench_moe_prefills() {
  bench_moe_prefill<64, 6, 2048, 1408>(512);  // DeepSeek-V2-Lite
  bench_moe_prefill<64, 6, 2048, 1408>(2048);
}

// The routed experts' decode streaming kernels (blocks/moe_stream.cuh) at each column split kWK (the
// build's choice, moe_stream_splits at kSms, marked), in a CUDA graph of 16 launches over 16 routings
// (so the chosen experts come from DRAM, as in a decode step). GB/s: the used experts' bytes.
template <int kExperts, int kTopK, int kHidden, int kInter>
struct MoeDecodeWeights {
  std::mt19937 rng{kExperts + kInter};
  DeviceBuffer<uint16_t> gate_up{random_bf16(static_cast<size_t>(kExperts) * 2 * kInter * kHidden, rng, 0.02f)};
  DeviceBuffer<uint16_t> down{random_bf16(static_cast<size_t>(kExperts) * kHidden * kInter, rng, 0.02f)};
};

template <int kExperts, int kTopK, int kHidden, int kInter>
struct MoeDecodeData {
  static constexpr int kRoutings = 16;
  const MoeDecodeWeights<kExperts, kTopK, kHidden, kInter>& w;
  int tokens;
  std::mt19937 rng;
  DeviceBuffer<uint16_t> h, act, pairs;
  size_t scratch_ints;  // a routing's buckets (moe_buckets.cuh: T · (top_k + experts + 1))
  double used_experts = 0.0;  // per routing, on average (counted by routings(), before ids is made)
  DeviceBuffer<int> ids, scratch;  // kRoutings routings one after another
  MoeDecodeData(const MoeDecodeWeights<kExperts, kTopK, kHidden, kInter>& weights, int t)
      : w(weights), tokens(t), rng(t), h(random_bf16(static_cast<size_t>(t) * kHidden, rng)),
        act(random_bf16(static_cast<size_t>(t) * kTopK * kInter, rng)), pairs(static_cast<size_t>(t) * kTopK * kHidden),
        scratch_ints(static_cast<size_t>(t) * (kTopK + kExperts + 1)), ids(routings()),
        scratch(scratch_ints * kRoutings) {
    for (int r = 0; r < kRoutings; ++r) {
      detail::launch_moe_bucket<kExperts, kTopK>(ids.get() + static_cast<size_t>(r) * t * kTopK, routing_scratch(r), t,
                                                 nullptr);
    }
    KILN_CUDA_OK(cudaDeviceSynchronize());
  }
  int* routing_scratch(int r) const { return scratch.get() + scratch_ints * r; }
  // Each token's top_k distinct experts drawn uniformly, kRoutings times.
  std::vector<int> routings() {
    std::vector<int> v;
    for (int r = 0; r < kRoutings; ++r) {
      std::vector<bool> used(kExperts, false);
      for (int i = 0; i < tokens; ++i) {
        std::vector<int> order(kExperts);
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        v.insert(v.end(), order.begin(), order.begin() + kTopK);
        for (int j = 0; j < kTopK; ++j) used[order[j]] = true;
      }
      used_experts += std::count(used.begin(), used.end(), true) / static_cast<double>(kRoutings);
    }
    return v;
  }
};

template <int kWK, int kExperts, int kTopK, int kHidden, int kInter>
void bench_moe_decode_splits(const MoeDecodeData<kExperts, kTopK, kHidden, kInter>& d) {
  using Up = detail::MoeGateUpActStream<kExperts, kTopK, kHidden, kInter>;
  using Down = detail::MoeDownPairsStream<kExperts, kTopK, kHidden, kInter>;
  constexpr int kR = MoeDecodeData<kExperts, kTopK, kHidden, kInter>::kRoutings;
  const double up_us = graph_us([&](int i, cudaStream_t s) {
    detail::launch_moe_stream<Up, kExperts, kTopK, kSms, kWK>(
        typename Up::Args{as_bf16(d.h), as_bf16(d.w.gate_up), d.routing_scratch(i % kR), reinterpret_cast<bf16*>(d.act.get())},
        d.tokens, s);
  }, kR);
  const double down_us = graph_us([&](int i, cudaStream_t s) {
    detail::launch_moe_stream<Down, kExperts, kTopK, kSms, kWK>(
        typename Down::Args{as_bf16(d.act), as_bf16(d.w.down), d.routing_scratch(i % kR), reinterpret_cast<bf16*>(d.pairs.get())},
        d.tokens, s);
  }, kR);
  const auto chosen = [](auto p) {
    using P = decltype(p);
    return detail::moe_stream_splits(P::kRows, P::kK, kTopK, kExperts, kSms) == kWK ? '*' : ' ';
  };
  const double up_bytes = d.used_experts * 2.0 * kInter * kHidden * 2, down_bytes = d.used_experts * kHidden * kInter * 2.0;
  std::printf("moe decode tokens %2d splits %d  gate_up_act %7.2f us %7.1f GB/s %c  down %7.2f us %7.1f GB/s %c  (%.1f experts)\n",
              d.tokens, kWK, up_us, up_bytes / up_us / 1e3, chosen(Up{}), down_us, down_bytes / down_us / 1e3,
              chosen(Down{}), d.used_experts);
  std::fflush(stdout);
}

void bench_moe_decodes() {
  const MoeDecodeWeights<64, 6, 2048, 1408> w;  // DeepSeek-V2-Lite
  std::printf("(* the column splits moe_stream_splits chooses at %d SMs)\n", kSms);
  for (int tokens : {1, 2, 8, 64}) {
    const MoeDecodeData<64, 6, 2048, 1408> d(w, tokens);
    bench_moe_decode_splits<8>(d);
    bench_moe_decode_splits<4>(d);
    bench_moe_decode_splits<2>(d);
    bench_moe_decode_splits<1>(d);
  }
}

// One Llama-3.1-8B decoder layer at one token, chained in a CUDA graph (each op overlapping the
// end of the one before, as in a decode step), its matrices in format F rotating beyond L2: the four
// GEMVs alone, then with the two RMSNorms and silu·mul between them (the attention left out), and
// the RMSNorm + qkv and silu·mul + down pairs against the GEMV alone. What the small kernels add
// is what folding them into the GEMVs could save.
template <MatrixFormat F>
void bench_layer_chain() {
  constexpr shape::rmsnorm kNorm{.dim = 4096, .eps = 1e-5f};
  constexpr shape::silu_mul kSilu{.dim = 14336};
  constexpr shape::linear kQkv{.n = 6144, .k = 4096, .out = LinearOut::store_bf16, .sms = kSms};
  constexpr shape::linear kO{.n = 4096, .k = 4096, .out = LinearOut::add_f32, .sms = kSms};
  constexpr shape::linear kGateUp{.n = 28672, .k = 4096, .out = LinearOut::store_bf16, .sms = kSms};
  constexpr shape::linear kDown{.n = 4096, .k = 14336, .out = LinearOut::add_f32, .sms = kSms};
  const RotatingQuantMatrix<F> qkv(6144, 4096), o(4096, 4096), gate_up(28672, 4096), down(4096, 14336);
  std::mt19937 rng(F == MatrixFormat::q8_0 ? 8 : 4);
  DeviceBuffer<float> x(random_f32(4096, rng));
  DeviceBuffer<uint16_t> gamma(random_bf16(4096, rng)), h(random_bf16(4096, rng)), qkv_out(6144),
      attn(random_bf16(4096, rng)), gate_up_out(random_bf16(28672, rng)), act(random_bf16(14336, rng));
  const auto norm = [&](cudaStream_t st) { rmsnorm<kNorm>(x.get(), as_bf16(gamma), as_bf16_mut(h), 1, st); };
  const auto silu = [&](cudaStream_t st) { silu_mul<kSilu>(as_bf16(gate_up_out), as_bf16_mut(act), 1, st); };
  const auto qkv_op = [&](int i, cudaStream_t st) {
    linear<kQkv>(as_bf16(h), qkv.at(i), as_bf16_mut(qkv_out), 1, nullptr, st);
  };
  const auto down_op = [&](int i, cudaStream_t st) {
    linear<kDown>(as_bf16(act), down.at(i), x.get(), 1, nullptr, st);
  };
  const auto layer = [&](int i, cudaStream_t st, bool small_ops) {
    if (small_ops) norm(st);
    qkv_op(i, st);
    linear<kO>(as_bf16(attn), o.at(i), x.get(), 1, nullptr, st);
    if (small_ops) norm(st);
    linear<kGateUp>(as_bf16(h), gate_up.at(i), as_bf16_mut(gate_up_out), 1, nullptr, st);
    if (small_ops) silu(st);
    down_op(i, st);
  };
  const double gemvs = graph_us([&](int i, cudaStream_t st) { layer(i, st, false); });
  const double all = graph_us([&](int i, cudaStream_t st) { layer(i, st, true); });
  const double qkv_alone = graph_us([&](int i, cudaStream_t st) { qkv_op(i, st); });
  const double norm_qkv = graph_us([&](int i, cudaStream_t st) {
    norm(st);
    qkv_op(i, st);
  });
  const double down_alone = graph_us([&](int i, cudaStream_t st) { down_op(i, st); });
  const double silu_down = graph_us([&](int i, cudaStream_t st) {
    silu(st);
    down_op(i, st);
  });
  std::printf("%s layer chain: GEMVs %.2f us, with RMSNorms and silu_mul %.2f (+%.2f); RMSNorm + qkv %.2f against "
              "%.2f (+%.2f); silu_mul + down %.2f against %.2f (+%.2f)\n",
              matrix_format_name(F), gemvs, all, all - gemvs, norm_qkv, qkv_alone, norm_qkv - qkv_alone, silu_down,
              down_alone, silu_down - down_alone);
  std::fflush(stdout);
}

}  // namespace
}  // namespace kiln::kernel_test

int main(int argc, char** argv) {
  using namespace kiln::kernel_test;
  if (!print_device_or_skip()) return 77;
  // --no-sweep: default geometries only; --quant-only: stop after the quantized GEMVs (either, both);
  // --prefill-only: only the prefill attention; --moe-only: only the routed experts' prefill GEMMs;
  // --moe-decode: the routed experts' decode streaming kernels at each column split;
  // --fp8: only Qwen3-8B's projections in FP8 and in bf16.
  // --batched: the bf16 GEMVs of Llama-3.1-8B and Llama-3.2-1B at 16, 32 and 64 tokens.
  // --small-batch: the bf16 GEMVs of Llama-3.2-1B, Qwen3-0.6B and Llama-3.1-8B at 8 tokens against 1:
  // unrolls 2 and 4, twice the row tiles a block, one token's loads as a probe (bench_gemv_small_batch).
  // --decode-attention: the decode's attention op (prep_attention) of Llama-3.1-8B and Llama-3.2-1B;
  // --decode-attention-256: only its batches of 256 (a short run to profile).
  // --format NAME (Q4_0, Q8_0, Q4_K, Q6_K, Q5_K, Q5_0, Q2_K, Q3_K): only that format's quantized GEMVs (a short device call).
  // --layer-chain: a Llama-3.1-8B layer's Q8_0 and Q4_K GEMVs chained with and without its small
  // kernels (bench_layer_chain).
  // --two-formats: Llama-3.1-8B's qkv in a Q4_K_M file's two formats, one launch or two (bench_two_formats).
  bool sweep = true, quant_only = false, fp8 = false, prefill_only = false, moe_only = false, batched = false;
  bool decode_attention = false, small_batch = false, only_256 = false;
  std::string format;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--format" && i + 1 < argc) format = argv[++i];
    sweep = sweep && arg != "--no-sweep";
    quant_only = quant_only || arg == "--quant-only";
    fp8 = fp8 || arg == "--fp8";
    prefill_only = prefill_only || arg == "--prefill-only";
    moe_only = moe_only || arg == "--moe-only";
    batched = batched || arg == "--batched";
    small_batch = small_batch || arg == "--small-batch";
    decode_attention = decode_attention || arg == "--decode-attention" || arg == "--decode-attention-256";
    only_256 = only_256 || arg == "--decode-attention-256";
    if (arg == "--two-formats") {
      bench_two_formats();
      return 0;
    }
    if (arg == "--layer-chain") {
      bench_layer_chain<kiln::MatrixFormat::q8_0>();
      bench_layer_chain<kiln::MatrixFormat::q4_k>();
      return 0;
    }
    if (arg == "--moe-decode") {
      bench_moe_decodes();
      return 0;
    }
    if (arg == "--ncu-batched") {
      run_gemv_batch_once<4096, 4096>();
      run_gemv_batch_once<28672, 4096>();
      run_gemv_batch_once<6144, 4096>();
      return 0;
    }
  }
  if (moe_only) {
    bench_moe_prefills();
    return 0;
  }
  if (prefill_only) {
    bench_prefills();
    return 0;
  }
  g_copy_gbps = measure_copy_gbps();
  std::printf("device-to-device cudaMemcpy: %.1f GB/s (bytes read + written)\n\n", g_copy_gbps);
  if (decode_attention) {
    bench_prep_attentions(only_256);
    return 0;
  }
  std::printf("%-22s %-26s %6s %10s %10s %8s\n", "gemv K -> N", "geometry", "tokens", "us", "GB/s", "of copy");
  if (small_batch) {  // Llama-3.2-1B's, Qwen3-0.6B's and Llama-3.1-8B's projections and LM heads
    bench_gemv_small_batch<3072, 2048>();
    bench_gemv_small_batch<2048, 2048>();
    bench_gemv_small_batch<16384, 2048>();
    bench_gemv_small_batch<2048, 8192>();
    bench_gemv_small_batch<128256, 2048>();
    bench_gemv_small_batch<4096, 1024>();
    bench_gemv_small_batch<1024, 2048>();
    bench_gemv_small_batch<6144, 1024>();
    bench_gemv_small_batch<1024, 3072>();
    bench_gemv_small_batch<151936, 1024>();
    bench_gemv_small_batch<6144, 4096>();
    bench_gemv_small_batch<28672, 4096>();
    bench_gemv_small_batch<4096, 14336>();
    return 0;
  }
  if (batched) {
    bench_gemv_batches<6144, 4096>();
    bench_gemv_batches<4096, 4096>();
    bench_gemv_batches<28672, 4096>();
    bench_gemv_batches<4096, 14336>();
    bench_gemv_batches<128256, 4096>();
    bench_gemv_batches<3072, 2048>();
    bench_gemv_batches<2048, 2048>();
    bench_gemv_batches<16384, 2048>();
    bench_gemv_batches<2048, 8192>();
    bench_gemv_batches<128256, 2048>();
    bench_gemv_batches<1024, 2048>();  // Qwen3-0.6B's o_proj and down_proj
    bench_gemv_batches<1024, 3072>();
    return 0;
  }
  if (fp8) {  // Qwen3-8B's qkv, o, gate_up, down and LM head
    bench_quant_shape<6144, 4096, kiln::MatrixFormat::fp8>(sweep);
    bench_quant_shape<4096, 4096, kiln::MatrixFormat::fp8>(sweep);
    bench_quant_shape<24576, 4096, kiln::MatrixFormat::fp8>(sweep);
    bench_quant_shape<4096, 12288, kiln::MatrixFormat::fp8>(sweep);
    bench_quant_shape<151936, 4096, kiln::MatrixFormat::fp8>(false);
    bench_gemv_shape<6144, 4096, false>(false);
    bench_gemv_shape<4096, 4096, false>(false);
    bench_gemv_shape<24576, 4096, false>(false);
    bench_gemv_shape<4096, 12288, false>(false);
    bench_gemv_shape<151936, 4096, false>(false);
    return 0;
  }
  // Llama-3.1-8B's projections (qkv, o, gate_up, down), Llama-3.2-1B's gate_up and SmolLM2's qkv.
  const auto want = [&](kiln::MatrixFormat f) { return format.empty() || format == matrix_format_name(f); };
  const kiln::MatrixFormat benched[] = {kiln::MatrixFormat::q4_0, kiln::MatrixFormat::q8_0, kiln::MatrixFormat::q4_k,
                                        kiln::MatrixFormat::q6_k, kiln::MatrixFormat::q5_k, kiln::MatrixFormat::q5_0,
                                        kiln::MatrixFormat::q2_k, kiln::MatrixFormat::q3_k};
  if (!format.empty() && std::none_of(std::begin(benched), std::end(benched), want)) {
    std::fprintf(stderr, "bench_kernels: --format %s: expected Q4_0, Q8_0, Q4_K, Q6_K, Q5_K, Q5_0, Q2_K or Q3_K\n",
                 format.c_str());
    return 2;
  }
  if (want(kiln::MatrixFormat::q4_0)) {
    bench_quant_shape<6144, 4096, kiln::MatrixFormat::q4_0>(sweep);
    bench_quant_shape<4096, 4096, kiln::MatrixFormat::q4_0>(sweep);
    bench_quant_shape<28672, 4096, kiln::MatrixFormat::q4_0>(sweep);
    bench_quant_shape<4096, 14336, kiln::MatrixFormat::q4_0>(sweep);
    bench_quant_shape<16384, 2048, kiln::MatrixFormat::q4_0>(sweep);
    bench_quant_shape<960, 576, kiln::MatrixFormat::q4_0>(false);
  }
  if (want(kiln::MatrixFormat::q8_0)) {
    bench_8b_projections<kiln::MatrixFormat::q8_0>(sweep);
    bench_quant_shape<128256, 4096, kiln::MatrixFormat::q8_0>(false);  // the LM head as the loader held it before
  }
  if (want(kiln::MatrixFormat::q4_k)) {
    bench_quant_shape<6144, 4096, kiln::MatrixFormat::q4_k>(sweep);
    bench_quant_shape<4096, 4096, kiln::MatrixFormat::q4_k>(false);
    bench_quant_shape<28672, 4096, kiln::MatrixFormat::q4_k>(sweep);
    bench_quant_shape<4096, 14336, kiln::MatrixFormat::q4_k>(sweep);
  }
  if (want(kiln::MatrixFormat::q6_k)) {
    bench_quant_shape<6144, 4096, kiln::MatrixFormat::q6_k>(sweep);
    bench_quant_shape<4096, 14336, kiln::MatrixFormat::q6_k>(sweep);
    bench_quant_shape<128256, 4096, kiln::MatrixFormat::q6_k>(false);  // Llama-3.1-8B's LM head
  }
  if (want(kiln::MatrixFormat::q5_k)) bench_8b_projections<kiln::MatrixFormat::q5_k>(sweep);
  if (want(kiln::MatrixFormat::q2_k)) bench_8b_projections<kiln::MatrixFormat::q2_k>(sweep);
  if (want(kiln::MatrixFormat::q3_k)) bench_8b_projections<kiln::MatrixFormat::q3_k>(sweep);
  if (want(kiln::MatrixFormat::q5_0)) {
    bench_quant_shape<6144, 4096, kiln::MatrixFormat::q5_0>(false);
    bench_quant_shape<28672, 4096, kiln::MatrixFormat::q5_0>(false);
    bench_quant_shape<4096, 14336, kiln::MatrixFormat::q5_0>(false);
    bench_quant_shape<960, 576, kiln::MatrixFormat::q5_0>(false);
  }
  if (quant_only || !format.empty()) return 0;
  bench_gemv_shape<8192, 2048, true>(sweep);
  bench_gemv_shape<2048, 8192, true>(sweep);
  bench_gemv_shape<1536, 576, true>(sweep);
  bench_gemv_shape<128256, 2048, true>(sweep);
  bench_gemv_shape<16384, 2048, false>(false);
  bench_gemv_shape<3072, 2048, false>(false);
  bench_gemv_shape<960, 576, false>(false);
  std::printf("\n");
  bench_decode<32, 8, 64, 16, 512, 16>(1, 1024);
  bench_decode<32, 8, 64, 16, 512, 16>(1, 8192);
  bench_decode<32, 8, 64, 16, 512, 16>(16, 2048);
  bench_decode<32, 8, 64, 16, 512, 16>(64, 1024);
  bench_decode<32, 8, 64, 16, 256, 32>(1, 8192);
  bench_decode<32, 8, 64, 16, 128, 64>(1, 8192);
  bench_decode<16, 8, 128, 16, 512, 16>(1, 4096);
  bench_decode<16, 8, 128, 16, 512, 16>(64, 1024);
  std::printf("\n");
  bench_prefills();
  return 0;
}
