// linear against ref::linear in its three outputs (bf16, added into the fp32 residual, fp32
// logits): the decode GEMV (templates/linear.cuh) over token counts that take every tile width and
// several passes (> 64 tokens), the same over Q8_0 / Q4_0 blocks (templates/linear_quant.cuh), and the
// prefill path through cuBLASLt (runtime/cuda/gemm.hpp, large
// products checked on a sample of rows: the CPU reference would take minutes on all of them).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "runtime/core/dtype.hpp"
#include "runtime/core/error.hpp"
#include "runtime/cuda/gemm.hpp"
#include "runtime/ref/ops.hpp"
#include "runtime/weights/dequant.hpp"
#include "runtime/weights/quant_repack.hpp"
#include "templates/linear.cuh"
#include "tests/kernels/fp8_inputs.hpp"
#include "tests/kernels/kernel_test.hpp"
#include "tests/kernels/quant_matrix.hpp"
#include "tests/weights/test_support.hpp"

namespace kiln::kernel_test {
namespace {

template <shape::linear S>
constexpr bool kBf16Out = S.out == LinearOut::store_bf16;
template <shape::linear S>
using Stored = std::conditional_t<kBf16Out<S>, uint16_t, float>;  // the host-side element of the output
template <shape::linear S>
using Out = typename detail::LinearOutType<S.out>::type;

template <shape::linear S>
std::string describe(const char* path, int tokens) {
  const char* out = S.out == LinearOut::store_bf16 ? "store_bf16" : S.out == LinearOut::add_f32 ? "add_f32" : "store_f32";
  return std::string(path) + " N " + std::to_string(S.n) + " K " + std::to_string(S.k) + " " + out + " tokens " +
         std::to_string(tokens);
}

// An output before the op: the residual it adds into (add_f32), else poison.
template <shape::linear S>
void start_output(DeviceBuffer<Stored<S>>& out, const std::vector<float>& residual) {
  if constexpr (S.out == LinearOut::add_f32) {
    out.upload(residual);
  } else {
    out.poison();
  }
}

// The reference output of `rows` of `in` (and, for add_f32, the residual they are added to).
template <shape::linear S>
std::vector<float> reference(const std::vector<float>& in, const std::vector<float>& weight,
                             const std::vector<float>& residual, int rows) {
  std::vector<float> ref = S.out == LinearOut::add_f32 ? residual : std::vector<float>(static_cast<size_t>(rows) * S.n);
  ref::linear(S, in.data(), weight.data(), ref.data(), rows);
  return ref;
}

template <shape::linear S>
void check_gemv(const std::vector<int>& token_counts) {
  std::mt19937 rng(8000 + S.n + S.k);
  const auto weight = random_bf16(static_cast<size_t>(S.n) * S.k, rng);
  DeviceBuffer<uint16_t> d_weight(weight);
  const int most = *std::max_element(token_counts.begin(), token_counts.end());
  DeviceBuffer<float> scratch(std::max<long long>(1, linear_scratch_floats<S>(most)));  // the wide plan's
  for (int tokens : token_counts) {
    const auto in = random_bf16(static_cast<size_t>(tokens) * S.k, rng);
    const auto residual = random_f32(static_cast<size_t>(tokens) * S.n, rng, 10.0f);
    DeviceBuffer<uint16_t> d_in(in);
    DeviceBuffer<Stored<S>> d_out(static_cast<size_t>(tokens) * S.n);
    start_output<S>(d_out, residual);
    kiln::linear<S>(as_bf16(d_in), as_bf16(d_weight), reinterpret_cast<Out<S>*>(d_out.get()), tokens, scratch.get(),
                    nullptr);
    const std::string what = describe<S>("gemv", tokens);
    check_launch(what);
    const auto ref = reference<S>(bf16_to_f32(in), bf16_to_f32(weight), residual, tokens);
    if constexpr (kBf16Out<S>) {
      check_close(what, ref, bf16_to_f32(d_out.download()), kBf16Limit);
    } else {
      check_close(what, ref, d_out.download(), 1e-5);
    }
  }
  DeviceBuffer<Stored<S>> none(1);
  kiln::linear<S>(as_bf16(d_weight), as_bf16(d_weight), reinterpret_cast<Out<S>*>(none.get()), 0, scratch.get(),
                  nullptr);
  check_launch("gemv, 0 tokens");
}

template <shape::linear S>
void check_cublaslt(cuda::GemmRunner& runner, int rows, bool decode = false) {
  std::mt19937 rng(11000 + rows + S.n + S.k);
  const auto in = random_bf16(static_cast<size_t>(rows) * S.k, rng);
  const auto weight = random_bf16(static_cast<size_t>(S.n) * S.k, rng);
  const auto residual = random_f32(static_cast<size_t>(rows) * S.n, rng, 10.0f);
  DeviceBuffer<uint16_t> d_in(in), d_weight(weight);
  DeviceBuffer<Stored<S>> d_out(static_cast<size_t>(rows) * S.n);
  start_output<S>(d_out, residual);
  CudaContext ctx;
  ctx.gemm = &runner;
  auto* out = reinterpret_cast<Out<S>*>(d_out.get());
  const auto multiply = [&] {
    if (decode) {
      cuda::decode_linear<S>(ctx, as_bf16(d_in), GpuMatrix{d_weight.get(), MatrixFormat::bf16}, out, rows);
    } else {
      cuda::linear<S>(ctx, as_bf16(d_in), as_bf16(d_weight), out, rows);
    }
  };
  const auto outputs = [&]() -> std::vector<float> {
    if constexpr (kBf16Out<S>) {
      return bf16_to_f32(d_out.download());
    } else {
      return d_out.download();
    }
  };
  multiply();
  const std::string what = describe<S>(decode ? "cuBLASLt, a decode step's algorithm" : "cuBLASLt", rows);
  check_launch(what);
  const std::vector<float> got_all = outputs();
  if (decode) {  // split-K or not, the same step gives the same bits again
    start_output<S>(d_out, residual);
    multiply();
    const std::vector<float> again = outputs();
    CHECK(std::memcmp(again.data(), got_all.data(), got_all.size() * sizeof(float)) == 0);
  }
  // Rows to check: all up to 64, else 64 spread over the range (first and last included).
  const int samples = std::min(rows, 64);
  const auto in_f = bf16_to_f32(in);
  std::vector<float> sample_in, sample_residual, got;
  for (int i = 0; i < samples; ++i) {
    const size_t r = samples == 1 ? 0 : static_cast<size_t>(1LL * i * (rows - 1) / (samples - 1));
    sample_in.insert(sample_in.end(), in_f.begin() + r * S.k, in_f.begin() + (r + 1) * S.k);
    sample_residual.insert(sample_residual.end(), residual.begin() + r * S.n, residual.begin() + (r + 1) * S.n);
    got.insert(got.end(), got_all.begin() + r * S.n, got_all.begin() + (r + 1) * S.n);
  }
  check_close(what, reference<S>(sample_in, bf16_to_f32(weight), sample_residual, samples), got,
              kBf16Out<S> ? kBf16Limit : 1e-5);
  long long nans = 0;  // the rows not sampled must be written too
  for (float v : got_all) nans += v != v;
  CHECK(nans == 0);
}

// Decode steps past one GEMV pass (cuda::decode_on_gemm) multiply on cuBLASLt with an algorithm
// chosen for their row count, split-K allowed (GemmRunner::run_decode): the graph sizes past 64.
TEST_CASE("linear, decode past one GEMV pass: cuBLASLt with the row count's algorithm", "[linear]") {
  cuda::GemmRunner runner;
  for (int rows : {72, 256}) {
    check_cublaslt<llama1b::kLinearQkvProj>(runner, rows, true);
    check_cublaslt<llama1b::kLinearOProj>(runner, rows, true);
    check_cublaslt<llama1b::kLinearDownProj>(runner, rows, true);
  }
  check_cublaslt<shape::linear{.n = 200, .k = 144, .out = LinearOut::add_f32, .sms = 132}>(runner, 136, true);
}

// The GEMV over a matrix kept in blocks (templates/linear_quant.cuh: `name`, `gpu` in device
// memory) against ref::linear on the values it holds (`weight`); every token's output must not
// depend on the token count (the first tokens of every count equal the count-1 run bit for bit);
// dequantize_matrix must give each value rounded once to bf16.
template <shape::linear S>
void check_matrix_gemv(const std::string& name, const GpuMatrix& gpu, const std::vector<float>& weight,
                       const std::vector<int>& token_counts) {
  std::mt19937 rng(9000 + S.n + S.k);
  const int most = *std::max_element(token_counts.begin(), token_counts.end());
  const auto in = random_bf16(static_cast<size_t>(most) * S.k, rng);
  const auto residual = random_f32(static_cast<size_t>(most) * S.n, rng, 10.0f);
  DeviceBuffer<uint16_t> d_in(in);
  DeviceBuffer<float> scratch(1);
  std::vector<Stored<S>> first;  // token 0's output at the first count
  for (int tokens : token_counts) {
    DeviceBuffer<Stored<S>> d_out(static_cast<size_t>(tokens) * S.n);
    const std::vector<float> res(residual.begin(), residual.begin() + static_cast<size_t>(tokens) * S.n);
    if constexpr (S.out == LinearOut::add_f32) {
      d_out.upload(res);
    } else {
      d_out.poison();
    }
    kiln::linear<S>(as_bf16(d_in), gpu, reinterpret_cast<Out<S>*>(d_out.get()), tokens, scratch.get(), nullptr);
    const std::string what = describe<S>((name + " gemv").c_str(), tokens);
    check_launch(what);
    const std::vector<Stored<S>> got = d_out.download();
    const std::vector<float> all_in = bf16_to_f32(in);
    const std::vector<float> in_f(all_in.begin(), all_in.begin() + static_cast<size_t>(tokens) * S.k);
    const auto ref = reference<S>(in_f, weight, res, tokens);
    if constexpr (kBf16Out<S>) {
      check_close(what, ref, bf16_to_f32(got), kBf16Limit);
    } else {
      check_close(what, ref, got, 1e-5);
    }
    const std::vector<Stored<S>> token0(got.begin(), got.begin() + S.n);
    if (first.empty()) first = token0;
    INFO(what << ": token 0 as at " << token_counts.front() << " tokens");
    CHECK(std::memcmp(token0.data(), first.data(), first.size() * sizeof(Stored<S>)) == 0);
  }
  DeviceBuffer<uint16_t> d_rows(static_cast<size_t>(S.n) * S.k);
  d_rows.poison();
  cuda::dequantize_matrix(gpu, S.n, S.k, as_bf16_mut(d_rows), nullptr);
  check_launch("dequantize_matrix");
  const std::vector<uint16_t> rows = d_rows.download();
  long long wrong = 0;
  for (size_t i = 0; i < rows.size(); ++i) wrong += rows[i] != f32_to_bf16(weight[i]);
  INFO("dequantize_matrix " << name << " N " << S.n << " K " << S.k << ": values not the matrix's rounded to bf16");
  CHECK(wrong == 0);
}

// ... over a GGUF block type, against ggml's dequantized values.
template <shape::linear S>
void check_quant_gemv(GgmlType type, const std::vector<int>& token_counts) {
  const QuantMatrix m = random_quant_matrix(type, S.n, S.k, static_cast<uint32_t>(S.n + 7 * S.k));
  DeviceBuffer<std::byte> d_matrix(m.matrix);  // cudaMalloc: 256-byte aligned, as the loader places matrices
  check_matrix_gemv<S>(std::string(ggml_type_name(type)), GpuMatrix{d_matrix.get(), m.format}, m.values, token_counts);
}

// ... over a matrix in two formats (GpuMatrix::split: a Q4_K_M file's qkv_proj, q and k in Q4_K
// and v in Q6_K): rows [0, split) of `head`, the rest of `tail`, the second part 256-byte aligned
// after the first, as the loader places them.
template <shape::linear S>
void check_two_format_gemv(GgmlType head, GgmlType tail, int split, const std::vector<int>& token_counts) {
  const QuantMatrix h = random_quant_matrix(head, split, S.k, static_cast<uint32_t>(split + 3 * S.k));
  const QuantMatrix t = random_quant_matrix(tail, S.n - split, S.k, static_cast<uint32_t>(S.n + 11 * S.k));
  const size_t tail_offset = (h.matrix.size() + 255) / 256 * 256;
  std::vector<std::byte> both(tail_offset + t.matrix.size(), std::byte{0});
  std::copy(h.matrix.begin(), h.matrix.end(), both.begin());
  std::copy(t.matrix.begin(), t.matrix.end(), both.begin() + static_cast<long>(tail_offset));
  std::vector<float> values = h.values;
  values.insert(values.end(), t.values.begin(), t.values.end());
  DeviceBuffer<std::byte> d_matrix(both);
  const GpuMatrix gpu{.data = d_matrix.get(), .format = h.format, .split = split,
                      .tail = d_matrix.get() + tail_offset, .tail_format = t.format};
  const std::string name =
      std::string(ggml_type_name(head)) + " | " + std::string(ggml_type_name(tail)) + " at row " + std::to_string(split);
  check_matrix_gemv<S>(name, gpu, values, token_counts);
}

// ... over FP8 codes (every finite one, subnormals included) with their 128 × 128 blocks' scales.
template <shape::linear S>
void check_fp8_gemv(const std::vector<int>& token_counts) {
  const test::Fp8Matrix m = test::random_fp8_matrix(S.n, S.k, static_cast<uint32_t>(S.n + 5 * S.k));
  DeviceBuffer<std::byte> d_matrix(m.matrix);
  check_matrix_gemv<S>("FP8", GpuMatrix{d_matrix.get(), MatrixFormat::fp8}, m.values, token_counts);
}

}  // namespace

TEST_CASE("linear, decode: the GEMV over Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K blocks, the "
          "prefill's bf16 rows from them",
          "[linear]") {
  const std::vector<int> counts = {1, 5, 8, 9, 33, 64, 70};
  // Q4_1: Q4_0's nibbles with a min (summed as Q4_K's, with Σx); Q5_0: a fifth bit apart; Q5_1 both.
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1}) {
    check_quant_gemv<llama1b::kLinearQkvProj>(t, counts);
    check_quant_gemv<llama1b::kLinearDownProj>(t, {1, 16, 64});
    check_quant_gemv<llama1b::kLinearLmHead>(t, {1, 9});
    check_quant_gemv<smollm2::kLinearQkvProj>(t, counts);  // 18 blocks a row: 4-block groups pad the last
    check_quant_gemv<smollm2::kLinearOProj>(t, {1, 33});
    check_quant_gemv<tiny_qwen3::kLinearDownProj>(t, counts);
    check_quant_gemv<shape::linear{.n = 40, .k = 96, .out = LinearOut::store_f32, .sms = 132}>(t, counts);
    check_quant_gemv<shape::linear{.n = 1000, .k = 64, .out = LinearOut::add_f32, .sms = 108}>(t, counts);
    // Rows of 4096 (Llama-3.1-8B's qkv, o and gate_up): a warp's four groups requested at once
    // (QuantGemvShape::kAllInFlight), the last row tile partial.
    check_quant_gemv<shape::linear{.n = 6008, .k = 4096, .out = LinearOut::store_bf16, .sms = 132}>(t, {1, 3, 9});
  }
  // Q4_K, Q5_K, Q6_K: rows of whole 256-value super-blocks (two groups each; k = 256 is one
  // super-block, so every warp's steps alternate between the two halves of the packed scales; Q6_K
  // takes a scale per 16 columns, the quants' high bits in their own area). Q2_K and Q3_K: a
  // super-block is one group of 8 blocks, a scale per 16 columns (Q2_K: a min too, Q3_K: third
  // bits apart).
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K}) {
    check_quant_gemv<llama1b::kLinearQkvProj>(t, counts);
    check_quant_gemv<llama1b::kLinearDownProj>(t, {1, 16, 64});
    check_quant_gemv<llama1b::kLinearLmHead>(t, {1, 9});
    check_quant_gemv<shape::linear{.n = 40, .k = 256, .out = LinearOut::store_f32, .sms = 132}>(t, counts);
    check_quant_gemv<shape::linear{.n = 1000, .k = 768, .out = LinearOut::add_f32, .sms = 108}>(t, counts);
    check_quant_gemv<shape::linear{.n = 200, .k = 14336, .out = LinearOut::store_bf16, .sms = 132}>(t, {1, 8, 33});
    // Rows of 4096: four groups a warp, its loop unrolled (QuantGemvShape::kUnrolledGroups).
    check_quant_gemv<shape::linear{.n = 1000, .k = 4096, .out = LinearOut::store_bf16, .sms = 132}>(t, {1, 3, 9});
  }
}

// Where the pieces of a stacked weight come in two formats: one launch for both parts at up to 8
// tokens where the parts' blocks are alike (Q4_K and Q6_K: the same warps a row) and the tail takes
// more bytes a value (linear_quant.cuh's kPartsKernel), one launch each otherwise (Q8_0 has twice
// the groups, so twice the warps at rows of 4096; Q4_0 | Q4_K the same bytes) and for
// more tokens; the split at a row tile's edge or inside one, the tail shorter or longer than a tile.
TEST_CASE("linear, decode: the GEMV over a matrix in two block formats, the prefill's bf16 rows from it", "[linear]") {
  const std::vector<int> counts = {1, 3, 8, 9, 70};
  constexpr shape::linear kQkv8b{.n = 6144, .k = 4096, .out = LinearOut::store_bf16, .sms = 132, .stacked = true};
  check_two_format_gemv<kQkv8b>(GgmlType::Q4_K, GgmlType::Q6_K, 5120, counts);  // a Q4_K_M file's qkv_proj
  check_two_format_gemv<kQkv8b>(GgmlType::Q5_K, GgmlType::Q6_K, 5120, counts);  // a Q5_K_M file's
  check_two_format_gemv<kQkv8b>(GgmlType::Q3_K, GgmlType::Q5_K, 5120, counts);  // a Q3_K_M file's first layers
  check_two_format_gemv<kQkv8b>(GgmlType::Q2_K, GgmlType::Q4_K, 5120, counts);  // a Q2_K file's
  check_two_format_gemv<kQkv8b>(GgmlType::Q8_0, GgmlType::Q6_K, 4096, counts);  // unlike: a launch each
  constexpr shape::linear kOdd{.n = 1000, .k = 768, .out = LinearOut::add_f32, .sms = 108, .stacked = true};
  check_two_format_gemv<kOdd>(GgmlType::Q4_0, GgmlType::Q4_K, 997, counts);  // bytes alike: a launch each
  check_two_format_gemv<kOdd>(GgmlType::Q6_K, GgmlType::Q8_0, 40, counts);
  constexpr shape::linear kSmall{.n = 200, .k = 64, .out = LinearOut::store_f32, .sms = 132, .stacked = true};
  check_two_format_gemv<kSmall>(GgmlType::Q4_0, GgmlType::Q8_0, 64, counts);  // Q4_0 pads its group: global inputs
  // SmolLM2's qkv_proj in its Q4_K_M file (rows of 576 take no K-quants): q and k Q5_0, v Q8_0.
  constexpr shape::linear kSmolQkv{.n = 960, .k = 576, .out = LinearOut::store_bf16, .sms = 132, .stacked = true};
  check_two_format_gemv<kSmolQkv>(GgmlType::Q5_0, GgmlType::Q8_0, 768, counts);
  check_two_format_gemv<kOdd>(GgmlType::Q4_1, GgmlType::Q5_0, 500, counts);  // alike: one launch
  check_two_format_gemv<kSmall>(GgmlType::Q4_1, GgmlType::Q5_0, 100, counts);  // one padded group a row: one launch
  check_two_format_gemv<kSmall>(GgmlType::Q5_0, GgmlType::Q4_1, 100, counts);  // fewer bytes in the tail: two
  check_two_format_gemv<kSmall>(GgmlType::Q5_0, GgmlType::Q8_0, 160, counts);
  check_two_format_gemv<kOdd>(GgmlType::Q5_1, GgmlType::Q5_K, 300, counts);
  check_two_format_gemv<kSmall>(GgmlType::Q5_1, GgmlType::Q5_0, 100, counts);
  // tiny-deepseek-v2's dense gate_up (gate Q5_0, up Q4_1) and tiny-llama's qkv (q, k Q5_0, v Q8_0).
  constexpr shape::linear kTinyGateUp{.n = 192, .k = 64, .out = LinearOut::store_bf16, .sms = 132, .stacked = true};
  check_two_format_gemv<kTinyGateUp>(GgmlType::Q5_0, GgmlType::Q4_1, 96, counts);
  constexpr shape::linear kTinyQkv{.n = 128, .k = 64, .out = LinearOut::store_bf16, .sms = 132, .stacked = true};
  check_two_format_gemv<kTinyQkv>(GgmlType::Q5_0, GgmlType::Q8_0, 96, counts);
}

TEST_CASE("linear, decode: the GEMV over FP8 codes with 128 × 128 block scales, the prefill's bf16 rows from them", "[linear]") {
  const std::vector<int> counts = {1, 5, 8, 9, 33, 64, 70};
  check_fp8_gemv<llama1b::kLinearQkvProj>(counts);
  check_fp8_gemv<llama1b::kLinearDownProj>({1, 16, 64});
  check_fp8_gemv<llama1b::kLinearLmHead>({1, 9});
  check_fp8_gemv<smollm2::kLinearQkvProj>(counts);  // 18 blocks a row: the last group pads
  check_fp8_gemv<tiny_qwen3::kLinearDownProj>(counts);
  check_fp8_gemv<shape::linear{.n = 40, .k = 96, .out = LinearOut::store_f32, .sms = 132}>(counts);  // a partial block each way, half a group of padding
  check_fp8_gemv<shape::linear{.n = 1000, .k = 64, .out = LinearOut::add_f32, .sms = 108}>(counts);
  check_fp8_gemv<shape::linear{.n = 200, .k = 14336, .out = LinearOut::store_bf16, .sms = 132}>({1, 8, 33});
  check_fp8_gemv<shape::linear{.n = 6008, .k = 4096, .out = LinearOut::store_bf16, .sms = 132}>({1, 3, 9});
}

TEST_CASE("linear, decode: the GEMV at every model's projection shapes", "[linear]") {
  const std::vector<int> real = {1, 4, 16, 64};
  check_gemv<llama1b::kLinearQkvProj>(real);
  check_gemv<llama1b::kLinearOProj>({1, 4, 16, 64, 100});
  check_gemv<llama1b::kLinearGateUpProj>(real);
  check_gemv<llama1b::kLinearDownProj>(real);
  check_gemv<llama1b::kLinearLmHead>({1, 16, 64});
  check_gemv<smollm2::kLinearQkvProj>(real);
  check_gemv<smollm2::kLinearOProj>(real);
  check_gemv<smollm2::kLinearGateUpProj>(real);
  check_gemv<smollm2::kLinearDownProj>(real);
  check_gemv<smollm2::kLinearLmHead>({1, 16, 64});
  check_gemv<qwen06::kLinearQkvProj>(real);
  check_gemv<qwen06::kLinearOProj>(real);
  check_gemv<qwen06::kLinearDownProj>(real);
  check_gemv<qwen06::kLinearLmHead>({1, 16});
  check_gemv<dsv2lite::kLinearRouter>(real);  // fp32 router logits, 64 rows
}

// The narrow plan sums a split's column steps in step order whatever its unroll (the steps a
// load group holds): unrolls 1, 2 and 4 give the same bits at 1 and 8 tokens. GemvShape picks the
// unroll from the shape (2 where a warp's split is short and 4's registers would leave blocks for a
// second wave), so this is what keeps that choice out of the outputs.
template <shape::linear S>
void check_unrolls_agree() {
  std::mt19937 rng(13000 + S.n + S.k);
  const auto weight = random_bf16(static_cast<size_t>(S.n) * S.k, rng);
  DeviceBuffer<uint16_t> d_weight(weight);
  for (int tokens : {1, 8}) {
    const auto in = random_bf16(static_cast<size_t>(tokens) * S.k, rng);
    const auto residual = random_f32(static_cast<size_t>(tokens) * S.n, rng, 10.0f);
    DeviceBuffer<uint16_t> d_in(in);
    std::vector<Stored<S>> got[3];
    auto run = [&]<int kUnroll>(std::vector<Stored<S>>& out_bits) {
      using Shape = detail::GemvShape<S.n, S.k, S.sms, 1, false, 0, 0, kUnroll>;
      DeviceBuffer<Stored<S>> d_out(static_cast<size_t>(tokens) * S.n);
      start_output<S>(d_out, residual);
      detail::launch_gemv_input<S.n, S.k, S.out, Shape>(detail::Bf16Input<S.k, Shape::kVec>{as_bf16(d_in)},
                                                         as_bf16(d_weight), reinterpret_cast<Out<S>*>(d_out.get()),
                                                         nullptr, tokens, nullptr);
      check_launch(describe<S>(("gemv, unroll " + std::to_string(kUnroll)).c_str(), tokens));
      out_bits = d_out.download();
    };
    run.template operator()<1>(got[0]);
    run.template operator()<2>(got[1]);
    run.template operator()<4>(got[2]);
    INFO(describe<S>("gemv, unrolls 1 and 2 against 4", tokens));
    CHECK(std::memcmp(got[0].data(), got[2].data(), got[2].size() * sizeof(Stored<S>)) == 0);
    CHECK(std::memcmp(got[1].data(), got[2].data(), got[2].size() * sizeof(Stored<S>)) == 0);
  }
}

TEST_CASE("linear, decode: the GEMV's unroll leaves its bits alone", "[linear]") {
  constexpr auto kGateUp = qwen06::kLinearGateUpProj;
  static_assert(detail::GemvShape<kGateUp.n, kGateUp.k, kGateUp.sms, 1>::kUnroll == 2, "the shape that takes 2");
  check_unrolls_agree<kGateUp>();                   // 384 tiles, 8 splits of 4 steps
  check_unrolls_agree<llama1b::kLinearDownProj>();   // 128 tiles, 16 splits of 16 steps
  check_unrolls_agree<llama1b::kLinearQkvProj>();
  check_unrolls_agree<shape::linear{.n = 1000, .k = 200, .out = LinearOut::add_f32, .sms = 132}>();  // odd shapes
  check_unrolls_agree<shape::linear{.n = 200, .k = 144, .out = LinearOut::store_bf16, .sms = 132}>();
}

TEST_CASE("linear, decode: the GEMV at odd shapes", "[linear]") {
  // N not a multiple of 16, K not a multiple of 32; K % 8 = 4, 2, 1: narrower loads. Token counts
  // around every tile width and past one 64-token pass.
  const std::vector<int> odd = {1, 3, 8, 9, 13, 31, 33, 64, 100, 130};
  check_gemv<shape::linear{.n = 200, .k = 144, .out = LinearOut::store_bf16, .sms = 132}>(odd);
  check_gemv<shape::linear{.n = 1000, .k = 200, .out = LinearOut::add_f32, .sms = 132}>(odd);
  check_gemv<shape::linear{.n = 33, .k = 100, .out = LinearOut::store_f32, .sms = 132}>(odd);
  check_gemv<shape::linear{.n = 17, .k = 30, .out = LinearOut::store_bf16, .sms = 132}>(odd);
  check_gemv<shape::linear{.n = 5, .k = 7, .out = LinearOut::store_f32, .sms = 132}>(odd);
  check_gemv<tiny_qwen3::kLinearDownProj>(odd);
  // The batched GEMV's shapes (a block for every SM): a partial row tile, a partial stage of steps.
  check_gemv<shape::linear{.n = 4200, .k = 264, .out = LinearOut::add_f32, .sms = 132}>(odd);
  check_gemv<shape::linear{.n = 2120, .k = 1000, .out = LinearOut::store_bf16, .sms = 132}>({9, 33, 64});
  // Another target's SM count only changes the split.
  check_gemv<shape::linear{.n = 3072, .k = 2048, .out = LinearOut::store_bf16, .sms = 108}>({1, 33});
}

// The prefill over an FP8 matrix of whole 128 × 128 blocks (fp8_gemm_shape): the inputs quantized to FP8 per 128
// columns (templates/fp8_rows.hpp) and cuBLASLt's FP8 GEMM, against the same arithmetic on the CPU (each
// input's code from f32_to_f8e4m3, every product summed in double). `written`: the op before wrote the FP8
// inputs (quantize_rows_fp8 stands in for it) and cuda::linear is given them with no bf16 rows.
// `row_scale`: a matrix of one scale, the inputs scaled per row, and cuBLASLt's per-token GEMM.
// `head_inputs` (with `written`): a matrix of one scale given inputs per 128 columns, as the
// attention writes them (fp8_head_inputs_for), on the block-scaled GEMM.
template <shape::linear S>
void check_fp8_gemm(cuda::GemmRunner& runner, int rows, bool written, bool row_scale = false, bool head_inputs = false) {
  const bool one_scale = row_scale || head_inputs;
  const test::Fp8Matrix m = test::random_fp8_matrix(S.n, S.k, static_cast<uint32_t>(S.n + 3 * S.k + rows), one_scale);
  std::mt19937 rng(12000 + rows + S.n);
  auto in = random_bf16(static_cast<size_t>(rows) * S.k, rng);
  if (row_scale && rows > 1) {  // blocks of a row far apart in size: a row's scale is not its blocks'
    for (int c = 0; c < 128; ++c) {
      uint16_t& v = in[static_cast<size_t>(S.k) + c];
      v = kiln::f32_to_bf16(64.0f * kiln::bf16_to_f32(v));
    }
  }
  const auto residual = random_f32(static_cast<size_t>(rows) * S.n, rng, 10.0f);
  const Fp8Inputs want = expected_fp8_inputs(bf16_to_f32(in), rows, S.k, row_scale);
  const int padded = want.padded;
  std::vector<double> xq(static_cast<size_t>(rows) * S.k);  // the inputs as the GEMM sees them: code · scale
  for (int t = 0; t < rows; ++t) {
    for (int c = 0; c < S.k; ++c) {
      const size_t at = static_cast<size_t>(t) * S.k + c;
      xq[at] = static_cast<double>(f8e4m3_to_f32(want.codes[at])) * want.scales[static_cast<size_t>(c / 128) * padded + t];
    }
  }
  std::vector<float> ref(static_cast<size_t>(rows) * S.n);
  for (int t = 0; t < rows; ++t) {
    for (int r = 0; r < S.n; ++r) {
      double sum = S.out == LinearOut::add_f32 ? residual[static_cast<size_t>(t) * S.n + r] : 0.0;
      for (int c = 0; c < S.k; ++c) sum += xq[static_cast<size_t>(t) * S.k + c] * m.values[static_cast<size_t>(r) * S.k + c];
      ref[static_cast<size_t>(t) * S.n + r] = static_cast<float>(sum);
    }
  }
  // Rows padded to a multiple of 4 (templates/fp8_rows.hpp): the buffers hold them, as a step's do.
  DeviceBuffer<std::byte> d_matrix(m.matrix);
  DeviceBuffer<uint16_t> d_in(in);
  Fp8InputBuffers inputs(rows, S.k);
  DeviceBuffer<Stored<S>> d_out(static_cast<size_t>(padded) * S.n);
  d_out.poison();
  if constexpr (S.out == LinearOut::add_f32) {
    std::vector<float> start = residual;
    start.resize(static_cast<size_t>(padded) * S.n, 0.0f);
    d_out.upload(start);
  }
  CudaContext ctx;  // no dequantized scratch: the FP8 path must not expand the matrix
  ctx.gemm = &runner;
  ctx.fp8_inputs = inputs.codes.get();
  ctx.fp8_input_scales = inputs.scales.get();
  const GpuMatrix matrix{d_matrix.get(), MatrixFormat::fp8, one_scale ? m.one_scale : 0.0f};
  auto* out = reinterpret_cast<Out<S>*>(d_out.get());
  if (written) {
    cuda::quantize_rows_fp8(as_bf16(d_in), rows, S.k, inputs.rows(row_scale), nullptr);
    const Fp8Rows given = head_inputs ? cuda::fp8_head_inputs_for(ctx, matrix) : cuda::fp8_inputs_for(ctx, matrix);
    REQUIRE(given);
    REQUIRE(given.row_scale == row_scale);
    cuda::linear<S>(ctx, nullptr, given, matrix, out, rows);
  } else {
    cuda::linear<S>(ctx, as_bf16(d_in), Fp8Rows{}, matrix, out, rows);
  }
  const std::string path = std::string(written ? "cuBLASLt FP8, inputs written before" : "cuBLASLt FP8") +
                           (row_scale ? ", per token" : ", per 128 columns") + (one_scale ? ", one weight scale" : "");
  const std::string what = describe<S>(path.c_str(), rows);
  check_launch(what);
  check_fp8_inputs(what, inputs, want);
  std::vector<Stored<S>> got = d_out.download();
  got.resize(static_cast<size_t>(rows) * S.n);
  if constexpr (kBf16Out<S>) {
    check_close(what, ref, bf16_to_f32(got), kBf16Limit);
  } else {
    check_close(what, ref, got, 1e-6);
  }
}

TEST_CASE("linear, prefill: cuBLASLt's FP8 GEMM over FP8 matrices, the inputs quantized per 128 columns", "[linear]") {
  cuda::GemmRunner runner;
  for (int rows : {1, 17, 300}) {
    check_fp8_gemm<llama1b::kLinearQkvProj>(runner, rows, false);
    check_fp8_gemm<llama1b::kLinearDownProj>(runner, rows, false);
    check_fp8_gemm<shape::linear{.n = 384, .k = 512, .out = LinearOut::add_f32, .sms = 132}>(runner, rows, false);
    check_fp8_gemm<shape::linear{.n = 256, .k = 1536, .out = LinearOut::store_f32, .sms = 132}>(runner, rows, false);
  }
  for (int rows : {1, 17}) {
    check_fp8_gemm<llama1b::kLinearGateUpProj>(runner, rows, true);
    check_fp8_gemm<shape::linear{.n = 384, .k = 512, .out = LinearOut::add_f32, .sms = 132}>(runner, rows, true);
  }
}

TEST_CASE("linear, prefill: cuBLASLt's per-token FP8 GEMM over matrices of one scale", "[linear]") {
  cuda::GemmRunner runner;
  for (int rows : {1, 17, 300}) {
    check_fp8_gemm<llama1b::kLinearQkvProj>(runner, rows, false, true);
    check_fp8_gemm<llama1b::kLinearDownProj>(runner, rows, false, true);
    check_fp8_gemm<shape::linear{.n = 384, .k = 512, .out = LinearOut::add_f32, .sms = 132}>(runner, rows, false, true);
    check_fp8_gemm<shape::linear{.n = 256, .k = 1536, .out = LinearOut::store_f32, .sms = 132}>(runner, rows, false, true);
    // Rows past 16,384 columns (quantize_rows reads their ends twice).
    check_fp8_gemm<shape::linear{.n = 128, .k = 20480, .out = LinearOut::store_bf16, .sms = 132}>(runner, rows, true, true);
  }
  for (int rows : {1, 17}) {
    check_fp8_gemm<llama1b::kLinearGateUpProj>(runner, rows, true, true);
    check_fp8_gemm<shape::linear{.n = 384, .k = 512, .out = LinearOut::add_f32, .sms = 132}>(runner, rows, true, true);
  }
  // Inputs per 128 columns, as the attention writes them, for a matrix of one scale: the block GEMM.
  for (int rows : {1, 17, 300}) {
    check_fp8_gemm<llama1b::kLinearOProj>(runner, rows, true, false, true);
    check_fp8_gemm<shape::linear{.n = 384, .k = 512, .out = LinearOut::add_f32, .sms = 132}>(runner, rows, true, false, true);
  }
}

TEST_CASE("linear, prefill: cuBLASLt", "[linear]") {
  cuda::GemmRunner runner;
  // Under a sanitizer (quick_run) 300 rows stand for 2,048: synccheck takes over 8 minutes on
  // cuBLASLt's GEMMs of 2,048 rows.
  for (int rows : {1, 17, quick_run() ? 300 : 2048}) {
    check_cublaslt<llama1b::kLinearQkvProj>(runner, rows);
    check_cublaslt<llama1b::kLinearDownProj>(runner, rows);
    check_cublaslt<llama1b::kLinearGateUpProj>(runner, rows);
    check_cublaslt<smollm2::kLinearQkvProj>(runner, rows);
  }
  // Under a sanitizer the LM head's 128,256 columns are left out: synccheck was still in its 1-row
  // GEMM when stopped at 500 s; the 1,000-column case below takes the same fp32 output path.
  if (!quick_run()) {
    check_cublaslt<llama1b::kLinearLmHead>(runner, 1);
    check_cublaslt<llama1b::kLinearLmHead>(runner, 64);
  }
  check_cublaslt<shape::linear{.n = 200, .k = 144, .out = LinearOut::add_f32, .sms = 132}>(runner, 333);
  check_cublaslt<shape::linear{.n = 1000, .k = 200, .out = LinearOut::store_f32, .sms = 132}>(runner, 5);
  // Zero rows: nothing to do. A bad size: kiln::Error naming it.
  runner.run(nullptr, nullptr, nullptr, 0, 64, 64, LinearOut::store_bf16, nullptr);
  CHECK_THROWS_WITH(runner.run(nullptr, nullptr, nullptr, 4, -1, 64, LinearOut::store_bf16, nullptr),
                    Catch::Contains("n=-1"));
}

}  // namespace kiln::kernel_test
