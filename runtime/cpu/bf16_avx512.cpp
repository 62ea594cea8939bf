// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (CMakeLists.txt); run only where
// avx512_bf16_available() says the processor has them.
#include "runtime/cpu/bf16_avx512.hpp"

#include <algorithm>
#include <vector>

#include "runtime/core/parallel.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace kiln::cpu {

#if defined(__x86_64__)

namespace {

constexpr int64_t kChunk = 32;  // columns of one vdpbf16ps (16 pairs)
// A tile: 4 rows × 6 tokens of sums, 4 weight vectors and 1 of activations in the 32 registers;
// the rows' weights (4 × 2·k bytes) stay in L1 across a chunk's token tiles. One token (decode)
// takes 4 rows at a time too (Llama-3.2-1B bf16 on 2 cores of an AMD EPYC with AVX-512: 53 ms a
// token, 8 rows 71, 2 rows 59, 16 rows 68).
constexpr int kRows = 4, kTokens = 6;
// Tokens a thread's rows take at a time: a chunk's bf16 activations (64 × 2·k bytes: 256 KB at
// k = 2,048) stay in L2 while the rows pass.
constexpr int64_t kTokenChunk = 64;

bool has_avx512_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
  return ((eax >> 5) & 1) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

// Rows the tiles ask for this far ahead (2 KB) where they read them first (kPrefetch: a row
// tile's first token tile; the others find them in L1): the hardware prefetcher alone left the
// core waiting on them. Llama-3.2-1B bf16 on 2 cores of an AMD EPYC, medians of 3 runs
// alternating: 32-token prompts 189 -> 205 tokens/s, 512-token 233 -> 252, decode unchanged.
constexpr int64_t kPrefetchValues = 1024;

// R rows from w (k values each) against C tokens from x (padded_k bf16 values each, zero past k):
// out[c·n + r].
template <int R, int C, bool kPrefetch>
void tile(const uint16_t* w, int64_t k, const uint16_t* x, int64_t padded_k, float* out, int64_t n, bool accumulate) {
  // Every loop over r and c unrolled (GCC's pragmas): an array of sums indexed by a loop that is not
  // stays in memory, and GCC 12 at -O3 then stores all 24 after every chunk (half the speed).
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  // The last chunk of a row is loaded under a mask, so nothing past the row is read.
  const __mmask32 last = static_cast<__mmask32>(k % kChunk == 0 ? ~0u : (1u << (k % kChunk)) - 1);
  for (int64_t col = 0; col < k; col += kChunk) {
    const __mmask32 mask = col + kChunk <= k ? ~__mmask32{0} : last;
    __m512bh wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(w + r * k + col + kPrefetchValues), _MM_HINT_T0);
      wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + r * k + col);
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512bh xv = (__m512bh)_mm512_load_si512(x + c * padded_k + col);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wv[r], xv);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float v = _mm512_reduce_add_ps(acc[r][c]);
      float& o = out[c * n + r];
      o = accumulate ? o + v : v;
    }
  }
}

// The tile of R rows and C tokens that reads the rows first (kPrefetch) or again.
template <int R, int C>
void tile_at(int64_t t, const uint16_t* w, int64_t k, const uint16_t* x, int64_t padded_k, float* out, int64_t n,
             bool accumulate) {
  if (t == 0) return tile<R, C, true>(w, k, x + t * padded_k, padded_k, out + t * n, n, accumulate);
  tile<R, C, false>(w, k, x + t * padded_k, padded_k, out + t * n, n, accumulate);
}

// R rows against `tokens` tokens: whole tiles of kTokens, then one of the rest.
template <int R>
void rows_against(const uint16_t* w, int64_t k, const uint16_t* x, int64_t padded_k, float* out, int64_t n,
                  int64_t tokens, bool accumulate) {
  int64_t t = 0;
  for (; t + kTokens <= tokens; t += kTokens) tile_at<R, kTokens>(t, w, k, x, padded_k, out, n, accumulate);
  switch (tokens - t) {
    case 0: break;
    case 1: tile_at<R, 1>(t, w, k, x, padded_k, out, n, accumulate); break;
    case 2: tile_at<R, 2>(t, w, k, x, padded_k, out, n, accumulate); break;
    case 3: tile_at<R, 3>(t, w, k, x, padded_k, out, n, accumulate); break;
    case 4: tile_at<R, 4>(t, w, k, x, padded_k, out, n, accumulate); break;
    default: tile_at<R, 5>(t, w, k, x, padded_k, out, n, accumulate); break;
  }
  static_assert(kTokens == 6, "the switch above takes the last 1..5 tokens");
}

// Token t's k activations rounded to bf16 (nearest even) at x, zero up to padded_k.
void to_bf16(const float* in, int64_t k, int64_t padded_k, uint16_t* x) {
  for (int64_t c = 0; c < padded_k; c += 16) {
    const int64_t left = std::clamp<int64_t>(k - c, 0, 16);
    const __m512 v = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << left) - 1), in + c);
    _mm256_store_si256(reinterpret_cast<__m256i*>(x + c), (__m256i)_mm512_cvtneps_pbh(v));
  }
}

}  // namespace

bool avx512_bf16_available() {
  static const bool available = has_avx512_bf16();
  return available;
}

void linear_bf16_avx512(const float* in, const uint16_t* w, int64_t n, int64_t k, float* out, int64_t tokens,
                        bool accumulate) {
  const int64_t padded_k = (k + kChunk - 1) / kChunk * kChunk;
  // The step's bf16 activations, rows of whole 64-byte chunks: grown once, reused by every later
  // call on this thread.
  struct alignas(64) Chunk {
    uint16_t v[kChunk];
  };
  thread_local std::vector<Chunk> act;
  const size_t chunks = static_cast<size_t>(tokens * padded_k / kChunk);
  if (act.size() < chunks) act.resize(chunks);
  uint16_t* const x = act.data()->v;
  parallel_for(tokens, 8, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) to_bf16(in + t * k, k, padded_k, x + t * padded_k);
  });
  parallel_for((n + kRows - 1) / kRows, 1, [&](int64_t begin, int64_t end) {
    const int64_t r0 = begin * kRows, r1 = std::min(n, end * kRows);
    for (int64_t t0 = 0; t0 < tokens; t0 += kTokenChunk) {
      const int64_t chunk = std::min(kTokenChunk, tokens - t0);
      const uint16_t* xc = x + t0 * padded_k;
      float* oc = out + t0 * n;
      int64_t r = r0;
      for (; r + kRows <= r1; r += kRows) rows_against<kRows>(w + r * k, k, xc, padded_k, oc + r, n, chunk, accumulate);
      for (; r < r1; ++r) rows_against<1>(w + r * k, k, xc, padded_k, oc + r, n, chunk, accumulate);
    }
  });
}

#else  // no AVX-512 off x86-64

bool avx512_bf16_available() { return false; }

void linear_bf16_avx512(const float*, const uint16_t*, int64_t, int64_t, float*, int64_t, bool) {}

#endif

}  // namespace kiln::cpu
