// linear_act (templates/linear_act.cuh): gate_up_proj's GEMV with SwiGLU in its epilogue, against
// its parts (linear into gate | up rows, then silu_mul) bit for bit, and against the CPU reference;
// at token counts that take the GEMV's narrow plan (1-8 tokens), the batched GEMV's narrow form
// (9-64), the quantized GEMV (1-8 tokens over GGUF blocks and FP8 codes) and the parts (past one
// pass; shapes whose pass sums its splits through scratch; a quantized matrix past 8 tokens).
// Whether the fused kernel ran shows in the gate | up rows: it never writes them, the parts do.
#include <algorithm>
#include <cstring>

#include "runtime/ref/ops.hpp"
#include "templates/linear_act.cuh"
#include "tests/kernels/kernel_test.hpp"
#include "tests/kernels/quant_matrix.hpp"
#include "tests/weights/test_support.hpp"

namespace kiln::kernel_test {
namespace {

enum class Path { fused, parts };

template <shape::linear_act S>
std::string describe(const std::string& matrix, int tokens) {
  return "linear_act " + matrix + " N " + std::to_string(S.n) + " K " + std::to_string(S.k) + " dim " +
         std::to_string(S.dim) + " tokens " + std::to_string(tokens);
}

// act of `tokens` rows through linear_act and through its parts, on `weight` (bf16 rows, a const
// bf16*, or a GpuMatrix kept quantized; weight_values: what it holds); `expect(tokens)`: the path
// linear_act should take.
template <shape::linear_act S, typename Weight, typename Expect>
void check_against_parts(const Weight& weight, const std::string& matrix, const std::vector<float>& weight_values,
                         const std::vector<int>& token_counts, Expect&& expect) {
  constexpr shape::linear kGateUp = detail::gate_up_linear<S>();
  constexpr shape::silu_mul kAct{.dim = S.dim};
  std::mt19937 rng(9000 + S.n + S.k);
  const int most = *std::max_element(token_counts.begin(), token_counts.end());
  DeviceBuffer<float> scratch(std::max<long long>(1, linear_act_scratch_floats<S>(most)));
  for (int tokens : token_counts) {
    const auto in = random_bf16(static_cast<size_t>(tokens) * S.k, rng);
    DeviceBuffer<uint16_t> d_in(in);
    DeviceBuffer<uint16_t> parts_rows(static_cast<size_t>(tokens) * S.n), parts_act(static_cast<size_t>(tokens) * S.dim);
    DeviceBuffer<uint16_t> fused_rows(static_cast<size_t>(tokens) * S.n), fused_act(static_cast<size_t>(tokens) * S.dim);
    parts_rows.poison();
    parts_act.poison();
    fused_rows.poison();
    fused_act.poison();
    const std::string what = describe<S>(matrix, tokens);
    kiln::linear<kGateUp>(as_bf16(d_in), weight, as_bf16_mut(parts_rows), tokens, scratch.get(), nullptr);
    kiln::silu_mul<kAct>(as_bf16(parts_rows), as_bf16_mut(parts_act), tokens, nullptr);
    check_launch(what + ", the parts");
    kiln::linear_act<S>(as_bf16(d_in), weight, as_bf16_mut(fused_rows), as_bf16_mut(fused_act), tokens, scratch.get(),
                        nullptr);
    check_launch(what);
    const std::vector<uint16_t> want = parts_act.download(), got = fused_act.download();
    INFO(what);
    CHECK(std::memcmp(want.data(), got.data(), got.size() * sizeof(uint16_t)) == 0);
    const std::vector<uint16_t> rows = fused_rows.download();
    const bool untouched = std::all_of(rows.begin(), rows.end(), [](uint16_t v) { return v == 0xFFFF; });
    CHECK((expect(tokens) == Path::fused) == untouched);
    // And the values against the CPU reference (gate | up in fp32, not rounded to bf16 first).
    std::vector<float> gate_up(static_cast<size_t>(tokens) * S.n), act(static_cast<size_t>(tokens) * S.dim);
    ref::linear(kGateUp, bf16_to_f32(in).data(), weight_values.data(), gate_up.data(), tokens);
    ref::silu_mul(kAct, gate_up.data(), act.data(), tokens);
    check_close(what, act, bf16_to_f32(got), kBf16Limit);
  }
}

// On bf16 rows: fused up to one pass where the pass adds its splits in its blocks (`fused_up_to`:
// the most tokens a fused pass takes; past it, and past 64, the parts). Through the overloads for
// bf16 rows, which compile no block format's kernels (through a GpuMatrix every shape here compiled
// all of them: half of this file's compile; the GpuMatrix overload hands bf16 rows to them).
template <shape::linear_act S>
void check_linear_act(const std::vector<int>& token_counts, int fused_up_to = 64) {
  std::mt19937 rng(9100 + S.n + S.k);
  const auto weight = random_bf16(static_cast<size_t>(S.n) * S.k, rng);
  DeviceBuffer<uint16_t> d_weight(weight);
  check_against_parts<S>(as_bf16(d_weight), "bf16", bf16_to_f32(weight), token_counts,
                         [&](int tokens) { return tokens <= fused_up_to ? Path::fused : Path::parts; });
}

// Kept quantized: the quantized GEMV with the same epilogue up to 8 tokens, the parts past them.
const std::vector<int> kQuantCounts = {1, 5, 8, 9, 64};
Path quant_path(int tokens) { return tokens <= 8 ? Path::fused : Path::parts; }

template <shape::linear_act S>
void check_quant_linear_act(GgmlType type) {
  const QuantMatrix m = random_quant_matrix(type, S.n, S.k, static_cast<uint32_t>(S.n + 13 * S.k));
  DeviceBuffer<std::byte> d_matrix(m.matrix);
  check_against_parts<S>(GpuMatrix{d_matrix.get(), m.format}, std::string(ggml_type_name(type)), m.values, kQuantCounts,
                         quant_path);
}

}  // namespace

TEST_CASE("linear_act writes silu(gate) · up with the bits of linear, then silu_mul", "[linear_act]") {
  const std::vector<int> counts = {1, 3, 8, 9, 16, 33, 64, 100};
  check_linear_act<qwen06::kLinearActGateUpProj>(counts);
  check_linear_act<llama1b::kLinearActGateUpProj>({1, 8, 17, 64});
  check_linear_act<smollm2::kLinearActGateUpProj>({1, 8, 17, 64});
  check_linear_act<dsv2lite::kLinearActSharedGateUp>({1, 8, 17, 64});  // DeepSeek's shared experts
  check_linear_act<tiny_qwen3::kLinearActGateUpProj>(counts);
  // A last tile of 3 features (203 = 25 · 8 + 3), K not whole 32-column steps. Its 26 row tiles are
  // fewer than the SMs, so past 8 tokens the batched GEMV's wide form sums the splits through
  // scratch (the parts run); with K % 8 = 4 there is no batched GEMV, and past 16 tokens the wide
  // plan's split sums take over.
  check_linear_act<shape::linear_act{.n = 406, .k = 144, .sms = 132, .stacked = true, .rank_slice = false, .dim = 203}>(
      counts, 8);
  check_linear_act<shape::linear_act{.n = 406, .k = 100, .sms = 132, .stacked = true, .rank_slice = false, .dim = 203}>(
      counts, 16);
  // 4 row tiles, 16 splits: past 8 tokens the batched GEMV's wide form sums its splits through
  // scratch, so the parts run.
  check_linear_act<shape::linear_act{.n = 64, .k = 2048, .sms = 132, .stacked = true, .rank_slice = false, .dim = 32}>(
      {1, 8, 9, 64}, 8);
}

TEST_CASE("linear_act over matrices kept in GGUF blocks or FP8 codes and over bf16 rows in a GpuMatrix", "[linear_act]") {
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1}) {
    check_quant_linear_act<smollm2::kLinearActGateUpProj>(t);  // 18 blocks a row
    check_quant_linear_act<tiny_qwen3::kLinearActGateUpProj>(t);
  }
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K}) {
    check_quant_linear_act<llama1b::kLinearActGateUpProj>(t);
    // Rows of 4096 (Llama-3.1-8B's gate_up), a last tile of 5 features.
    check_quant_linear_act<shape::linear_act{.n = 1002, .k = 4096, .sms = 132, .stacked = true, .rank_slice = false,
                                             .dim = 501}>(t);
  }
  {  // bf16 rows in a GpuMatrix: handed to the overload for bf16 rows (the models' call)
    constexpr shape::linear_act S = llama1b::kLinearActGateUpProj;
    std::mt19937 rng(9300);
    const auto weight = random_bf16(static_cast<size_t>(S.n) * S.k, rng);
    DeviceBuffer<uint16_t> d_weight(weight);
    check_against_parts<S>(GpuMatrix{d_weight.get(), MatrixFormat::bf16}, "bf16 GpuMatrix", bf16_to_f32(weight),
                           {1, 9, 64, 65}, [](int tokens) { return tokens <= 64 ? Path::fused : Path::parts; });
  }
  const test::Fp8Matrix m = test::random_fp8_matrix(llama1b::kLinearActGateUpProj.n, llama1b::kLinearActGateUpProj.k, 9200);
  DeviceBuffer<std::byte> d_matrix(m.matrix);
  check_against_parts<llama1b::kLinearActGateUpProj>(GpuMatrix{d_matrix.get(), MatrixFormat::fp8}, "FP8", m.values,
                                                     kQuantCounts, quant_path);
}

}  // namespace kiln::kernel_test
