// embed (templates/embed.cuh) against ref::embed: an exact copy of table rows into fp32, from bf16
// rows or from a GGUF file's blocks as the GPU keeps them (ggml's dequantized values, bit for bit).
#include <cstring>

#include "runtime/ref/ops.hpp"
#include "runtime/weights/dequant.hpp"
#include "runtime/weights/quant_repack.hpp"
#include "templates/embed.cuh"
#include "tests/kernels/kernel_test.hpp"
#include "tests/weights/test_support.hpp"

namespace kiln::kernel_test {
namespace {

// `rank` > 0: the table is that tensor-parallel rank's rows of a vocabulary of (ranks) × S.vocab;
// token ids are drawn from the whole vocabulary, so most are other ranks' (zero rows).
template <shape::embed S>
void check_embed(int tokens, int rank = 0, int ranks = 1) {
  std::mt19937 rng(1000 + S.dim + tokens);
  const auto table = random_bf16(static_cast<size_t>(S.vocab) * S.dim, rng);
  std::vector<int> ids(tokens);
  std::uniform_int_distribution<int> pick(0, S.vocab * ranks - 1);
  for (auto& id : ids) id = pick(rng);
  DeviceBuffer<uint16_t> d_table(table);
  DeviceBuffer<int> d_ids(ids);
  DeviceBuffer<float> d_x(static_cast<size_t>(tokens) * S.dim);
  d_x.poison();
  kiln::embed<S>(d_ids.get(), as_bf16(d_table), d_x.get(), rank, tokens, nullptr);
  const std::string what = "embed dim " + std::to_string(S.dim) + " tokens " + std::to_string(tokens) + " rank " +
                           std::to_string(rank) + " of " + std::to_string(ranks);
  check_launch(what);
  std::vector<float> ref(static_cast<size_t>(tokens) * S.dim);
  ref.assign(ref.size(), std::nanf(""));  // poisoned: every row must be written, zeros included
  const std::vector<float> table_f32 = bf16_to_f32(table);
  ref::embed(S, ids.data(), CpuMatrix{table_f32.data(), MatrixFormat::f32}, ref.data(), rank, tokens);
  check_close(what, ref, d_x.download(), kExact);
  // The same table as a GpuMatrix of bf16 rows (how a generated model passes it).
  d_x.poison();
  kiln::embed<S>(d_ids.get(), GpuMatrix{d_table.get(), MatrixFormat::bf16}, d_x.get(), rank, tokens, nullptr);
  check_launch(what + ", GpuMatrix");
  check_close(what + ", GpuMatrix", ref, d_x.download(), kExact);
  kiln::embed<S>(d_ids.get(), as_bf16(d_table), d_x.get(), rank, 0, nullptr);
  check_launch(what + ", 0 tokens");
}

// A table of GGUF blocks, repacked as the loader keeps it on the GPU: each token's row must be
// ggml's dequantization of the file's row exactly (and zeros for another rank's token).
// A table in format f (`matrix` in its GPU layout) holding `values`: each token's row must be its
// values exactly (and zeros for another rank's token).
template <shape::embed S>
void check_embed_matrix(const std::string& name, MatrixFormat f, const std::vector<std::byte>& matrix,
                        const std::vector<float>& values, int tokens, int rank, int ranks) {
  std::mt19937 rng(2000 + S.dim + tokens);
  std::vector<int> ids(tokens);
  std::uniform_int_distribution<int> pick(0, S.vocab * ranks - 1);
  for (auto& id : ids) id = pick(rng);
  ids.front() = rank * S.vocab + S.vocab - 1;  // the last row of the table
  DeviceBuffer<std::byte> d_matrix(matrix);
  DeviceBuffer<int> d_ids(ids);
  DeviceBuffer<float> d_x(static_cast<size_t>(tokens) * S.dim);
  d_x.poison();
  kiln::embed<S>(d_ids.get(), GpuMatrix{d_matrix.get(), f}, d_x.get(), rank, tokens, nullptr);
  const std::string what = "embed from " + name + " dim " + std::to_string(S.dim) +
                           " tokens " + std::to_string(tokens) + " rank " + std::to_string(rank);
  check_launch(what);
  std::vector<float> ref(static_cast<size_t>(tokens) * S.dim);
  ref::embed(S, ids.data(), CpuMatrix{values.data(), MatrixFormat::f32}, ref.data(), rank, tokens);
  const std::vector<float> got = d_x.download();
  INFO(what << ": rows not the table's values bit for bit");
  CHECK(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0);
}

// ... of GGUF blocks, whose values are ggml's dequantization of the file's rows.
template <shape::embed S>
void check_embed_blocks(GgmlType type, int tokens, int rank = 0, int ranks = 1) {
  const MatrixFormat f = *matrix_format_of(type);
  const std::vector<std::byte> blocks = test::random_gguf_blocks(type, S.vocab, S.dim, static_cast<uint32_t>(S.dim + tokens));
  std::vector<float> values(static_cast<size_t>(S.vocab) * S.dim);
  dequantize(type, blocks, values);
  std::vector<std::byte> matrix(static_cast<size_t>(matrix_bytes(f, S.vocab, S.dim)), std::byte{0});
  const size_t row_bytes = ggml_tensor_bytes(type, S.dim);
  for (int r = 0; r < S.vocab; ++r) {
    repack_row(f, std::span<const std::byte>(blocks).subspan(r * row_bytes, row_bytes), S.vocab, S.dim, r,
               matrix.data());
  }
  check_embed_matrix<S>(std::string(ggml_type_name(type)), f, matrix, values, tokens, rank, ranks);
}

// ... of FP8 codes and block scales (--quantize fp8's table).
template <shape::embed S>
void check_embed_fp8(int tokens, int rank = 0, int ranks = 1) {
  const test::Fp8Matrix m = test::random_fp8_matrix(S.vocab, S.dim, static_cast<uint32_t>(S.dim + 3 * tokens));
  check_embed_matrix<S>("FP8", MatrixFormat::fp8, m.matrix, m.values, tokens, rank, ranks);
}

}  // namespace

TEST_CASE("embed copies table rows into the fp32 residual stream", "[embed]") {
  check_embed<llama1b::kEmbedTokens>(1);
  check_embed<llama1b::kEmbedTokens>(2048);
  check_embed<smollm2::kEmbedTokens>(37);
  check_embed<shape::embed{.vocab = 1000, .dim = 200}>(300);  // rows of 200: 8-byte vectors
  check_embed<shape::embed{.vocab = 500, .dim = 999}>(9);     // an odd dim: scalar loads
  // Tensor parallelism: the second of two ranks and the last of four (other ranks' tokens: zeros).
  check_embed<shape::embed{.vocab = 64128, .dim = 4096}>(64, 1, 2);
  check_embed<shape::embed{.vocab = 1000, .dim = 200}>(300, 3, 4);
}

TEST_CASE("embed decodes a table kept in Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K blocks to "
          "ggml's values",
          "[embed]") {
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1}) {
    check_embed_blocks<llama1b::kEmbedTokens>(t, 1);
    check_embed_blocks<llama1b::kEmbedTokens>(t, 300);
    check_embed_blocks<smollm2::kEmbedTokens>(t, 37);  // 18 blocks a row: 4-block groups pad the last
    check_embed_blocks<shape::embed{.vocab = 1000, .dim = 96}>(t, 40, 1, 2);
  }
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K}) {
    check_embed_blocks<llama1b::kEmbedTokens>(t, 1);
    check_embed_blocks<llama1b::kEmbedTokens>(t, 129);
    check_embed_blocks<shape::embed{.vocab = 300, .dim = 768}>(t, 50, 3, 4);
  }
}

TEST_CASE("embed decodes a table kept in FP8 to its values", "[embed]") {
  check_embed_fp8<llama1b::kEmbedTokens>(1);
  check_embed_fp8<llama1b::kEmbedTokens>(129);
  check_embed_fp8<smollm2::kEmbedTokens>(37);  // 18 blocks a row: the last group pads
  check_embed_fp8<shape::embed{.vocab = 1000, .dim = 96}>(40, 1, 2);
}

}  // namespace kiln::kernel_test
