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
// A tile: 4 rows × 6 tokens of sums, 4 weight vectors and 1 of activations in the 32 registers.
// One token (decode) takes 4 rows at a time too (Llama-3.2-1B bf16 on 2 cores of an AMD EPYC
// with AVX-512: 53 ms a token, 8 rows 71, 2 rows 59, 16 rows 68).
constexpr int kRows = 4, kTokens = 6;
// The threads' rows take the tokens a chunk at a time, as many as keep the chunk's bf16
// activations within kChunkBytes (of a 1 MB L2) while a row tile's weights (4 rows, in L1) run
// past them: 128 tokens of 2,048 values, 32 of 8,192. Two cores of an AMD EPYC, [n, k] × 512
// tokens (GFLOP/s) at 128 / 256 / 512 / 768 / 1,024 KB: [3072, 2048] 650 / 670 / 695 / 712 / 675,
// [16384, 2048] 628 / 663 / 673 / 645 / 597, [2048, 8192] 501 / 630 / 650 / 618 / 582 (64-token
// chunks of any row before: 685, 664, 574).
constexpr int64_t kChunkBytes = 512 * 1024;

bool has_avx512_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
  return ((eax >> 5) & 1) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

// Rows the tiles ask for this far ahead (2 KB) where they read them first and more tiles follow
// (kPrefetch: a row tile's first token tile of a prefill chunk; the others find them in L1): the
// hardware prefetcher alone left the core waiting on them. Llama-3.2-1B bf16 on 2 cores of an AMD EPYC, medians of 3 runs
// alternating: 32-token prompts 189 -> 205 tokens/s, 512-token 233 -> 252, decode unchanged.
constexpr int64_t kPrefetchValues = 1024;

// A tile's operands: rows from w (k values each) against tokens from x (padded_k bf16 values
// each, zero past k), summed into out[c·n + r] (=, or += with add).
struct TileArgs {
  const uint16_t* w;
  int64_t k;
  const uint16_t* x;
  int64_t padded_k;
  float* out;
  int64_t n;
  bool add;
};

// One chunk of 32 columns from col into the tile's sums: whole (a plain load; a masked one costs
// decode 12% of its bandwidth) or the row's last, loaded under a mask so nothing past it is read.
template <int R, int C, bool kPrefetch, bool kLast>
__attribute__((always_inline)) inline void chunk(__m512 (&acc)[R][C], const TileArgs& p, int64_t col) {
  const int64_t k = p.k;
  __m512bh wv[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if constexpr (kPrefetch) {  // past the row's end: what the next row tile reads first
      const int64_t ahead = col + kPrefetchValues;
      const uint16_t* next = ahead < k ? p.w + r * k + ahead : p.w + (r + R) * k + (ahead - k);
      _mm_prefetch(reinterpret_cast<const char*>(next), _MM_HINT_T0);
    }
    const uint16_t* row = p.w + r * k + col;
    if constexpr (kLast) {
      wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(static_cast<__mmask32>((1u << (k - col)) - 1), row);
    } else {
      wv[r] = (__m512bh)_mm512_loadu_si512(row);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    const __m512bh xv = (__m512bh)_mm512_load_si512(p.x + c * p.padded_k + col);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wv[r], xv);
  }
}

template <int R, int C, bool kPrefetch>
void tile(const TileArgs& p) {
  // Every loop over r and c unrolled (GCC's pragmas): an array of sums indexed by a loop that is not
  // stays in memory, and GCC 12 at -O3 then stores all 24 after every chunk (half the speed).
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const int64_t whole = p.k / kChunk * kChunk;
  for (int64_t col = 0; col < whole; col += kChunk) chunk<R, C, kPrefetch, false>(acc, p, col);
  if (whole < p.k) chunk<R, C, kPrefetch, true>(acc, p, whole);
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float v = _mm512_reduce_add_ps(acc[r][c]);
      float& o = p.out[c * p.n + r];
      o = p.add ? o + v : v;
    }
  }
}

// The tile of R rows and C tokens from token t of `tokens`: the first reads the rows from memory,
// and asks for them ahead where more tiles follow (one token, decode, streams faster without).
template <int R, int C>
void tile_at(TileArgs p, int64_t t, int64_t tokens) {
  p.x += t * p.padded_k;
  p.out += t * p.n;
  if (t == 0 && tokens > kTokens) return tile<R, C, true>(p);
  tile<R, C, false>(p);
}

// R rows against `tokens` tokens: whole tiles of kTokens, then one of the rest.
template <int R>
void rows_against(const TileArgs& p, int64_t tokens) {
  int64_t t = 0;
  for (; t + kTokens <= tokens; t += kTokens) tile_at<R, kTokens>(p, t, tokens);
  switch (tokens - t) {
    case 0: break;
    case 1: tile_at<R, 1>(p, t, tokens); break;
    case 2: tile_at<R, 2>(p, t, tokens); break;
    case 3: tile_at<R, 3>(p, t, tokens); break;
    case 4: tile_at<R, 4>(p, t, tokens); break;
    default: tile_at<R, 5>(p, t, tokens); break;
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
  const int64_t chunk_tokens = std::max<int64_t>(kTokens, kChunkBytes / (2 * padded_k));
  parallel_for((n + kRows - 1) / kRows, 1, [&](int64_t begin, int64_t end) {
    const int64_t r0 = begin * kRows, r1 = std::min(n, end * kRows);
    for (int64_t t0 = 0; t0 < tokens; t0 += chunk_tokens) {
      TileArgs p{w + r0 * k, k, x + t0 * padded_k, padded_k, out + t0 * n + r0, n, accumulate};
      const int64_t chunk = std::min(chunk_tokens, tokens - t0);
      int64_t r = r0;
      for (; r + kRows <= r1; r += kRows, p.w += kRows * k, p.out += kRows) rows_against<kRows>(p, chunk);
      for (; r < r1; ++r, p.w += k, ++p.out) rows_against<1>(p, chunk);
    }
  });
}

#else  // no AVX-512 off x86-64

bool avx512_bf16_available() { return false; }

void linear_bf16_avx512(const float*, const uint16_t*, int64_t, int64_t, float*, int64_t, bool) {}

#endif

}  // namespace kiln::cpu
