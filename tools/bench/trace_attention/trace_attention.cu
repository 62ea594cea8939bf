// Where a decode attention block's time goes: a copy of prep_attention (make_traced.py writes it
// from templates/, with KILN_TRACE marks) whose thread 0 records clock64 and %globaltimer at each
// mark; the host splits the blocks by start time into the waves they ran in and prints each phase's
// mean and spread, and the kernel's time by events (L2 flushed before each launch; no kernel before
// it, so the PDL wait returns at once). Built with -DNOTRACE, the marks compile to nothing: the
// event times of the kernel as the decode runs it, to compare variants (build.sh's TEMPLATES_DIR).
// Every run prints an FNV hash of the output, equal across variants that keep the
// bits. A GPU tool, never built by ctest: tools/bench/trace_attention/build.sh.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

constexpr int kMarks = 10;
__device__ long long* g_clk;
__device__ unsigned long long* g_ns;
__device__ int* g_sm;

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ int sm_id() {
  int s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
#ifdef NOTRACE
#define KILN_TRACE(n) \
  do {                \
  } while (0)
#else
#define KILN_TRACE(n)                                                                                   \
  do {                                                                                                  \
    if (threadIdx.x == 0) {                                                                             \
      const long long b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;               \
      g_clk[b * kMarks + (n)] = clock64();                                                              \
      g_ns[b * kMarks + (n)] = global_ns();                                                             \
      if ((n) == 0) g_sm[b] = sm_id();                                                                  \
    }                                                                                                   \
  } while (0)
#endif

#include "prep_attention_traced.cuh"

#define OK(x)                                                                                           \
  do {                                                                                                  \
    cudaError_t e = (x);                                                                                \
    if (e != cudaSuccess) {                                                                             \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__);              \
      std::exit(1);                                                                                     \
    }                                                                                                   \
  } while (0)

// Device buffers of the shape being traced, freed when it is done (free_all).
std::vector<void*> g_buffers;
template <typename T>
T* dev(size_t n) {
  T* p = nullptr;
  OK(cudaMalloc(&p, n * sizeof(T)));
  g_buffers.push_back(p);
  return p;
}
void free_all() {
  for (void* p : g_buffers) OK(cudaFree(p));
  g_buffers.clear();
}

// n bf16 values near 1 (0x3c00 ± 128 in the bits) to the device: not zeros, not all alike.
kiln::bf16* random_bf16(size_t n, std::mt19937& rng) {
  auto* p = dev<kiln::bf16>(n);
  std::vector<uint16_t> h(n);
  std::uniform_int_distribution<int> d(0, 255);
  for (auto& x : h) x = static_cast<uint16_t>(0x3c00 + d(rng) - 128);
  OK(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice));
  return p;
}

template <int kHeads, int kKvHeads, int kHeadDim, bool kQkNorm, int kBuild>
void trace(const char* name, int batch, int context) {
  using namespace kiln;
  constexpr int kPage = 16, kRow = (kHeads + 2 * kKvHeads) * kHeadDim;
  constexpr shape::prep_attention S{.heads = kHeads, .kv_heads = kKvHeads, .head_dim = kHeadDim, .row = kRow,
                                    .page_size = kPage, .qk_norm = kQkNorm, .eps = 1e-6f, .scale = 0.088f,
                                    .partition = 512, .max_partitions = 16};
  std::mt19937 rng(7);
  const int pages_per_seq = (context + kPage - 1) / kPage;
  const size_t layer_elems = static_cast<size_t>(batch) * pages_per_seq * 2 * kKvHeads * kPage * kHeadDim;
  constexpr int kCopies = 4;
  bf16* cache = random_bf16(layer_elems * kCopies, rng);
  std::vector<int> tables(static_cast<size_t>(batch) * pages_per_seq);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), rng);
  const int pos = context - 1;
  std::vector<int> slots(batch), positions(batch, pos), ctx(batch, context);
  for (int s = 0; s < batch; ++s) slots[s] = tables[s * pages_per_seq + pos / kPage] * kPage + pos % kPage;
  int* d_tables = dev<int>(tables.size());
  int* d_slots = dev<int>(batch);
  int* d_pos = dev<int>(batch);
  int* d_ctx = dev<int>(batch);
  OK(cudaMemcpy(d_tables, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice));
  OK(cudaMemcpy(d_slots, slots.data(), batch * 4, cudaMemcpyHostToDevice));
  OK(cudaMemcpy(d_pos, positions.data(), batch * 4, cudaMemcpyHostToDevice));
  OK(cudaMemcpy(d_ctx, ctx.data(), batch * 4, cudaMemcpyHostToDevice));
  std::vector<float> rope(static_cast<size_t>(context) * kHeadDim);
  for (size_t i = 0; i < rope.size(); i += 2) {
    rope[i] = 0.8f;
    rope[i + 1] = 0.6f;
  }
  float* d_rope = dev<float>(rope.size());
  OK(cudaMemcpy(d_rope, rope.data(), rope.size() * 4, cudaMemcpyHostToDevice));
  bf16* qkv = random_bf16(static_cast<size_t>(batch) * kRow, rng);
  bf16* norm = dev<bf16>(kHeadDim);
  {
    std::vector<uint16_t> h(kHeadDim, 0x3f80);
    OK(cudaMemcpy(norm, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  }
  bf16* out = dev<bf16>(static_cast<size_t>(batch) * kHeads * kHeadDim);
  float* scratch = dev<float>(static_cast<size_t>(prep_attention_scratch_floats<S>(batch)));
  unsigned* counters = dev<unsigned>(static_cast<size_t>(batch) * kKvHeads);
  OK(cudaMemset(counters, 0, static_cast<size_t>(batch) * kKvHeads * 4));
  char* flush = dev<char>(size_t{256} << 20);

  const int blocks = batch * kKvHeads * 16;
  long long* clk = dev<long long>(static_cast<size_t>(blocks) * kMarks);
  unsigned long long* ns = dev<unsigned long long>(static_cast<size_t>(blocks) * kMarks);
  int* sm = dev<int>(blocks);
  OK(cudaMemcpyToSymbol(g_clk, &clk, sizeof(clk)));
  OK(cudaMemcpyToSymbol(g_ns, &ns, sizeof(ns)));
  OK(cudaMemcpyToSymbol(g_sm, &sm, sizeof(sm)));

  cudaEvent_t e0, e1;
  OK(cudaEventCreate(&e0));
  OK(cudaEventCreate(&e1));
  auto launch = [&](int copy) {
    detail::launch_prep_attention<S, kBuild == 1 ? 0 : kBuild>(qkv, norm, norm, d_pos, d_rope, d_slots,
                                                              cache + layer_elems * copy, out, d_ctx, d_tables,
                                                              pages_per_seq, batch, scratch, counters, nullptr, 0);
  };
  for (int i = 0; i < 6; ++i) launch(i % kCopies);
  float best = 1e9f;
  std::vector<long long> h_clk(static_cast<size_t>(blocks) * kMarks);
  std::vector<unsigned long long> h_ns(static_cast<size_t>(blocks) * kMarks);
  std::vector<int> h_sm(blocks);
  for (int r = 0; r < 5; ++r) {
    OK(cudaMemset(clk, 0, static_cast<size_t>(blocks) * kMarks * 8));
    OK(cudaMemset(ns, 0, static_cast<size_t>(blocks) * kMarks * 8));
    OK(cudaMemset(flush, r, size_t{256} << 20));
    OK(cudaEventRecord(e0));
    launch(r % kCopies);
    OK(cudaEventRecord(e1));
    OK(cudaDeviceSynchronize());
    float ms = 0;
    OK(cudaEventElapsedTime(&ms, e0, e1));
    best = std::min(best, ms);
    if (r == 4) {
      OK(cudaMemcpy(h_clk.data(), clk, h_clk.size() * 8, cudaMemcpyDeviceToHost));
      OK(cudaMemcpy(h_ns.data(), ns, h_ns.size() * 8, cudaMemcpyDeviceToHost));
      OK(cudaMemcpy(h_sm.data(), sm, h_sm.size() * 4, cudaMemcpyDeviceToHost));
    }
  }
  {
    std::vector<uint16_t> h(static_cast<size_t>(batch) * kHeads * kHeadDim);
    OK(cudaMemcpy(h.data(), out, h.size() * 2, cudaMemcpyDeviceToHost));
    unsigned long long f = 1469598103934665603ull;
    for (uint16_t x : h) f = (f ^ x) * 1099511628211ull;
    std::printf("\n[%s batch %d ctx %d] out fnv %016llx\n", name, batch, context, f);
  }
  int clock_khz = 0;
  OK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const double cyc_us = clock_khz / 1e3;  // cycles a µs
  std::printf("== %s build %d: batch %d ctx %d: event %.2f us (best of 5)\n", name, kBuild, batch, context, best * 1e3);
#ifndef NOTRACE
  // Block b's mark m (globaltimer ns, clock64 cycles).
  const auto ns_at = [&](int b, int m) { return h_ns[static_cast<size_t>(b) * kMarks + m]; };
  const auto clk_at = [&](int b, int m) { return h_clk[static_cast<size_t>(b) * kMarks + m]; };
  // The blocks that attended (the last mark set; a partition slot past every context returns early).
  std::vector<int> ran;
  for (int b = 0; b < blocks; ++b)
    if (ns_at(b, kMarks - 1) != 0) ran.push_back(b);
  unsigned long long t_first = ~0ull, t_last = 0;
  for (int b : ran) {
    t_first = std::min(t_first, ns_at(b, 0));
    for (int m = 0; m < kMarks; ++m) t_last = std::max(t_last, ns_at(b, m));
  }
  std::printf("\n== %s build %d: batch %d ctx %d: %zu blocks attended, event %.2f us (best of 5), first start -> last mark %.2f us, clock %d MHz\n",
              name, kBuild, batch, context, ran.size(), best * 1e3, (t_last - t_first) / 1e3, clock_khz / 1000);
  const char* phase[] = {"begin (page ids, first K/V issued)", "pdl wait", "q/k/v prep + sync", "q regs (fresh K/V asked)",
                         "scores + sync", "softmax + sync", "values + shuffles + sync", "partials to smem + sync",
                         "sum + store"};
  // Start offsets: print a histogram in 1 µs bins.
  std::vector<int> hist(64, 0);
  for (int b : ran) hist[std::min<int>(63, (ns_at(b, 0) - t_first) / 1000)]++;
  std::printf("blocks started per µs from the first: ");
  for (int i = 0; i < 64; ++i)
    if (hist[i]) std::printf("[%d]=%d ", i, hist[i]);
  std::printf("\n");
  // Wave 1: the blocks that started within 1.5 µs of the first (all that the SMs held at once);
  // later: the rest, each started when one before it ended.
  for (int wave = 0; wave < 2; ++wave) {
    std::vector<int> w;
    for (int b : ran) {
      const bool late = ns_at(b, 0) - t_first > 1500;
      if (late == (wave == 1)) w.push_back(b);
    }
    if (w.empty()) continue;
    double start_mean = 0, total_mean = 0;
    for (int b : w) {
      start_mean += (ns_at(b, 0) - t_first) / 1e3;
      total_mean += (clk_at(b, 9) - clk_at(b, 0)) / cyc_us;
    }
    std::printf(" %s: %zu blocks, mean start +%.2f us, mean block time %.2f us (clock64)\n",
                wave == 0 ? "wave 1" : "later", w.size(),
                start_mean / w.size(), total_mean / w.size());
    for (int m = 1; m < kMarks; ++m) {
      std::vector<double> d;
      for (int b : w) d.push_back((clk_at(b, m) - clk_at(b, m - 1)) / cyc_us);
      std::sort(d.begin(), d.end());
      const double mean = std::accumulate(d.begin(), d.end(), 0.0) / d.size();
      std::printf("   %-36s mean %6.2f  p10 %6.2f  p50 %6.2f  p90 %6.2f us\n", phase[m - 1], mean, d[d.size() / 10],
                  d[d.size() / 2], d[d.size() * 9 / 10]);
    }
  }
  // Blocks per SM at once: the max count of blocks of one SM whose [start, end] overlap a moment.
  int most = 0;
  for (int b : ran) {
    int c = 0;
    const auto t = ns_at(b, 0);
    for (int o : ran)
      if (h_sm[o] == h_sm[b] && ns_at(o, 0) <= t && ns_at(o, 9) >= t) ++c;
    most = std::max(most, c);
  }
  std::printf(" most blocks of one SM at once: %d\n", most);
#endif
  std::fflush(stdout);
  OK(cudaEventDestroy(e0));
  OK(cudaEventDestroy(e1));
  free_all();
}

// The shapes of one set: "batch" (the default; sequences whose pairs overflow the two-an-SM
// build's wave), "small" (1 sequence: the one-an-SM build; 2-32: the two-an-SM build; short and
// long contexts).
int main(int argc, char** argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return 77;
  const char* set = argc > 1 ? argv[1] : "batch";
  if (std::strcmp(set, "small") == 0) {
    trace<16, 8, 128, true, 1>("Qwen3-0.6B heads", 1, 96);
    trace<32, 8, 128, false, 1>("Llama-8B heads", 1, 8000);
    trace<32, 8, 128, false, 1>("Llama-8B heads", 1, 32000);
    trace<16, 8, 128, true, 2>("Qwen3-0.6B heads", 2, 96);
    trace<16, 8, 128, true, 2>("Qwen3-0.6B heads", 8, 96);
    trace<16, 8, 128, true, 2>("Qwen3-0.6B heads", 32, 96);
    trace<32, 8, 64, false, 2>("Llama-1B heads", 8, 160);
    trace<32, 8, 128, false, 2>("Llama-8B heads", 8, 96);
    // Contexts of several partitions (512 keys each), merged by the kernel.
    trace<32, 8, 128, false, 2>("Llama-8B heads", 2, 8000);
    trace<32, 8, 128, false, 2>("Llama-8B heads", 8, 8000);
    trace<32, 8, 128, false, 2>("Llama-8B heads", 4, 2000);
    trace<32, 8, 64, false, 2>("Llama-1B heads", 16, 4000);
    trace<16, 8, 128, true, 2>("Qwen3-0.6B heads", 32, 1100);
    return 0;
  }
  if (std::strcmp(set, "batch") != 0) {
    std::fprintf(stderr, "trace_attention: unknown shape set '%s' (expected batch or small)\n", set);
    return 2;
  }
  trace<16, 8, 128, true, 2>("Qwen3-0.6B heads", 64, 96);
  trace<16, 8, 128, true, 2>("Qwen3-0.6B heads", 64, 48);
  trace<16, 8, 128, true, 2>("Qwen3-0.6B heads", 32, 96);
  trace<16, 8, 128, true, 2>("Qwen3-0.6B heads", 8, 96);
  trace<32, 8, 128, false, 2>("Llama-8B heads", 64, 96);
  trace<32, 8, 64, false, 2>("Llama-1B heads", 64, 96);
  trace<32, 8, 64, false, 2>("Llama-1B heads", 64, 160);
  trace<16, 8, 128, true, 2>("Qwen3-0.6B heads", 256, 160);
  // Contexts of several partitions (512 keys each), merged by the kernel.
  trace<16, 8, 128, true, 2>("Qwen3-0.6B heads", 64, 1100);
  trace<32, 8, 128, false, 2>("Llama-8B heads", 64, 600);
  return 0;
}
