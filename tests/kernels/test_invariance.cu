// Batch invariance: a token's numbers must come out bit for bit the same whatever else shares its
// step, so that a request's greedy output equals running it alone (issue 4's serving check):
//   - the decode GEMV at any batch size (1 .. 64),
//   - cuBLASLt's prefill GEMM at any row count, small ones included (a re-admitted sequence
//     prefills the remainder of its prompt after prefix-cache hits, often a handful of rows),
//   - prefill attention whether a prompt's queries run in one chunk or several, alone or batched
//     with another sequence.
// Every projection shape of SmolLM2-135M, Qwen3-0.6B and Llama-3.2-1B is checked.
#include <cstring>
#include <numeric>
#include <string>

#include "runtime/cuda/gemm.hpp"
#include "templates/attention.cuh"
#include "templates/gemv.cuh"
#include "tests/kernels/test_groups.hpp"
#include "tests/support/gpu_harness.hpp"

namespace kiln::kernel_test {

namespace {

// Rows [first, first + count) of `whole` equal `part` bit for bit.
template <typename T>
bool same_bits(const std::vector<T>& whole, const std::vector<T>& part, size_t first, size_t width) {
  return std::memcmp(whole.data() + first * width, part.data(), part.size() * sizeof(T)) == 0;
}

std::string shape_name(int n, int k) { return std::to_string(n) + "x" + std::to_string(k); }

template <int kN, int kK, GemvOut kOut>
void gemv_invariance() {
  using Out = typename detail::GemvOutType<kOut>::type;
  std::mt19937 rng(kN * 31 + kK);
  constexpr int kTokens = 64;
  DeviceBuffer<uint16_t> weight(random_bf16(static_cast<size_t>(kN) * kK, rng, 0.05f));
  DeviceBuffer<uint16_t> in(random_bf16(static_cast<size_t>(kTokens) * kK, rng));
  const std::vector<float> start = random_f32(static_cast<size_t>(kTokens) * kN, rng);  // residual (add_f32)
  auto run = [&](int first, int count) {
    DeviceBuffer<Out> out(static_cast<size_t>(count) * kN);
    if constexpr (kOut == GemvOut::add_f32) {
      out.upload(std::vector<float>(start.begin() + first * kN, start.begin() + (first + count) * kN));
    } else {
      out.poison();
    }
    gemv<kN, kK, kOut>(as_bf16(in) + static_cast<long long>(first) * kK, as_bf16(weight), out.get(), count, nullptr);
    KILN_CUDA_OK(cudaDeviceSynchronize());
    return out.download();
  };
  const auto all = run(0, kTokens);
  bool ok = true;
  for (int batch : {1, 5, 33}) {
    for (int first = 0; first + batch <= kTokens; first += batch) ok &= same_bits(all, run(first, batch), first, kN);
  }
  expect(ok, "gemv " + shape_name(kN, kK) + ": each token's output identical at batch 1, 5, 33 and 64");
}

void gemm_invariance(cuda::GemmRunner& runner, int n, int k, cuda::GemmOut mode) {
  std::mt19937 rng(n * 7 + k);
  const int rows = 2048;
  DeviceBuffer<uint16_t> weight(random_bf16(static_cast<size_t>(n) * k, rng, 0.05f));
  DeviceBuffer<uint16_t> in(random_bf16(static_cast<size_t>(rows) * k, rng));
  const size_t out_bytes = mode == cuda::GemmOut::store_bf16 ? 2 : 4;
  auto run = [&](int first, int count) {
    DeviceBuffer<uint8_t> out(static_cast<size_t>(count) * n * out_bytes);
    KILN_CUDA_OK(cudaMemset(out.get(), 0, out.size()));
    runner.run(as_bf16(in) + static_cast<long long>(first) * k, as_bf16(weight), out.get(), count, n, k, mode, nullptr);
    KILN_CUDA_OK(cudaDeviceSynchronize());
    return out.download();
  };
  const auto all = run(0, rows);
  std::string bad;
  for (const auto& [first, count] : {std::pair{0, 1}, {5, 2}, {9, 3}, {17, 5}, {40, 8}, {100, 13}, {130, 16},
                                     {300, 64}, {700, 100}, {1000, 513}, {1600, 447}}) {
    if (!same_bits(all, run(first, count), static_cast<size_t>(first), static_cast<size_t>(n) * out_bytes)) {
      bad += " " + std::to_string(count);
    }
  }
  expect(bad.empty(), "gemm " + shape_name(n, k) + ": each row's output identical at 1..2048 rows" +
                          (bad.empty() ? "" : " (differs at row counts:" + bad + ")"));
}

// A 300-token sequence's queries, in one chunk, in three chunks (as chunked prefill runs them), and
// batched after another sequence: every query row must come out the same.
template <int kHeads, int kKvHeads, int kHeadDim, int kPageSize>
void prefill_attention_invariance(const char* model) {
  constexpr int kRow = (kHeads + 2 * kKvHeads) * kHeadDim;
  constexpr int kLen = 300, kOther = 77;
  std::mt19937 rng(kHeads * 131 + kHeadDim);
  const int pages_per_seq = (kLen + kPageSize - 1) / kPageSize, other_pages = (kOther + kPageSize - 1) / kPageSize;
  const size_t page_elems = static_cast<size_t>(2) * kKvHeads * kPageSize * kHeadDim;
  DeviceBuffer<uint16_t> cache(random_bf16(page_elems * (pages_per_seq + other_pages), rng));
  DeviceBuffer<uint16_t> q(random_bf16(static_cast<size_t>(kLen + kOther) * kRow, rng));
  std::vector<int> table(pages_per_seq), other_table(pages_per_seq, 0);
  std::iota(table.begin(), table.end(), other_pages);  // the sequence's pages come after the other's
  for (int p = 0; p < other_pages; ++p) other_table[p] = p;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));

  // queries: (sequence, first position, count) -> the output rows of the sequence's queries.
  struct Query {
    bool other;
    int first, count;
  };
  auto run = [&](const std::vector<Query>& queries) {
    std::vector<int> query_start = {0}, positions, tables;
    std::vector<uint16_t> rows;
    const auto host_q = q.download();
    for (const Query& qu : queries) {
      for (int i = 0; i < qu.count; ++i) {
        positions.push_back(qu.first + i);
        const size_t src = static_cast<size_t>(qu.other ? kLen + qu.first + i : qu.first + i) * kRow;
        rows.insert(rows.end(), host_q.begin() + src, host_q.begin() + src + kRow);
      }
      query_start.push_back(query_start.back() + qu.count);
      const auto& t = qu.other ? other_table : table;
      tables.insert(tables.end(), t.begin(), t.end());
    }
    const int tokens = query_start.back();
    DeviceBuffer<uint16_t> d_rows(rows);
    DeviceBuffer<int> d_start(query_start), d_pos(positions), d_tables(tables);
    DeviceBuffer<uint16_t> out(static_cast<size_t>(tokens) * kHeads * kHeadDim);
    out.poison();
    int longest = 0;
    for (const Query& qu : queries) longest = std::max(longest, qu.count);
    attention_prefill<kHeads, kKvHeads, kHeadDim, kPageSize, kRow>(
        as_bf16(d_rows), as_bf16(cache), as_bf16_mut(out), d_start.get(), d_pos.get(), d_tables.get(), pages_per_seq,
        static_cast<int>(queries.size()), longest, scale, nullptr);
    KILN_CUDA_OK(cudaDeviceSynchronize());
    return out.download();
  };
  const size_t width = static_cast<size_t>(kHeads) * kHeadDim;
  const auto whole = run({{false, 0, kLen}});
  const auto tail = run({{false, 250, 50}});
  const auto middle = run({{false, 64, 111}});
  const auto batched = run({{true, 0, kOther}, {false, 200, 100}});
  const bool ok = same_bits(whole, tail, 250, width) && same_bits(whole, middle, 64, width) &&
                  std::memcmp(whole.data() + 200 * width, batched.data() + kOther * width, 100 * width * 2) == 0;
  expect(ok, std::string("attention_prefill ") + model + ": each query row identical in one chunk, in parts, and batched");
}

}  // namespace

void run_invariance_tests() {
  // Decode GEMV: every projection of the three models.
  gemv_invariance<960, 576, GemvOut::store_bf16>();      // SmolLM2 qkv
  gemv_invariance<576, 576, GemvOut::add_f32>();         // SmolLM2 o_proj
  gemv_invariance<3072, 576, GemvOut::store_bf16>();     // SmolLM2 gate_up
  gemv_invariance<576, 1536, GemvOut::add_f32>();        // SmolLM2 down
  gemv_invariance<49152, 576, GemvOut::store_f32>();     // SmolLM2 lm_head
  gemv_invariance<4096, 1024, GemvOut::store_bf16>();    // Qwen3-0.6B qkv
  gemv_invariance<1024, 2048, GemvOut::add_f32>();       // Qwen3-0.6B o_proj
  gemv_invariance<6144, 1024, GemvOut::store_bf16>();    // Qwen3-0.6B gate_up
  gemv_invariance<1024, 3072, GemvOut::add_f32>();       // Qwen3-0.6B down
  gemv_invariance<151936, 1024, GemvOut::store_f32>();   // Qwen3-0.6B lm_head
  gemv_invariance<3072, 2048, GemvOut::store_bf16>();    // Llama-3.2-1B qkv
  gemv_invariance<2048, 8192, GemvOut::add_f32>();       // Llama-3.2-1B down
  gemv_invariance<200, 144, GemvOut::add_f32>();         // odd

  // Prefill GEMM (cuBLASLt): the same shapes.
  cuda::GemmRunner runner;
  for (const auto& [n, k, mode] : std::vector<std::tuple<int, int, cuda::GemmOut>>{
           {960, 576, cuda::GemmOut::store_bf16},    {576, 576, cuda::GemmOut::add_f32},
           {3072, 576, cuda::GemmOut::store_bf16},   {576, 1536, cuda::GemmOut::add_f32},
           {49152, 576, cuda::GemmOut::store_f32},   {4096, 1024, cuda::GemmOut::store_bf16},
           {1024, 2048, cuda::GemmOut::add_f32},     {6144, 1024, cuda::GemmOut::store_bf16},
           {1024, 3072, cuda::GemmOut::add_f32},     {151936, 1024, cuda::GemmOut::store_f32},
           {3072, 2048, cuda::GemmOut::store_bf16},  {2048, 2048, cuda::GemmOut::add_f32},
           {16384, 2048, cuda::GemmOut::store_bf16}, {2048, 8192, cuda::GemmOut::add_f32},
           {128256, 2048, cuda::GemmOut::store_f32}}) {
    gemm_invariance(runner, n, k, mode);
  }

  // Prefill attention under chunking and batching.
  prefill_attention_invariance<9, 3, 64, 16>("SmolLM2-135M");
  prefill_attention_invariance<16, 8, 128, 16>("Qwen3-0.6B");
  prefill_attention_invariance<32, 8, 64, 16>("Llama-3.2-1B");
  prefill_attention_invariance<6, 2, 48, 5>("odd (6/2 heads × 48, page 5)");
}

}  // namespace kiln::kernel_test
