// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (CMakeLists.txt); run only where
// avx512_bf16_available() says the processor has them.
#include "runtime/cpu/bf16_avx512.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/core/parallel.hpp"
#include "runtime/cpu/bf16_pack.hpp"
#include "runtime/cpu/token_tiles.hpp"

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

bool has_vbmi() { return __builtin_cpu_supports("avx512vbmi"); }

// Packed rows (bf16_pack.hpp) back to bf16, 32 values at a time: the 48-byte slot's code pairs
// spread to 16-bit lanes by one byte permutation (lane i takes bytes 3(i/2) + (i&1) and the next),
// the odd lanes shifted down 4; then the exponent rebased where it is not 0, and the sign moved
// from bit 11 to 15: seven vector operations and the slot's load a block.
class Unpacker {
 public:
  explicit Unpacker(const std::byte* exceptions) : exceptions_(exceptions) {
    alignas(64) uint8_t bytes[64];
    alignas(64) uint16_t shifts[32];
    for (int i = 0; i < 32; ++i) {
      const int at = 3 * (i / 2) + (i & 1);
      bytes[2 * i] = static_cast<uint8_t>(at);
      bytes[2 * i + 1] = static_cast<uint8_t>(at + 1);
      shifts[i] = static_cast<uint16_t>((i & 1) * 4);
    }
    pairs_ = _mm512_load_si512(bytes);
    shifts_ = _mm512_load_si512(shifts);
  }

  // The block of a slot whose header byte is `base`. The slot's load reads 16 bytes past it: the
  // next slot, or past the last chunk the exceptions or the rest of the matrix's bf16 allocation.
  __attribute__((always_inline)) __m512bh block(const std::byte* slot, uint8_t base) const {
    if (__builtin_expect(base == kRawBlock, 0)) {
      uint32_t index;
      std::memcpy(&index, slot, sizeof(index));
      return (__m512bh)_mm512_loadu_si512(exceptions_ + int64_t{index} * kPackedRawBytes);
    }
    const __m512i code = _mm512_srlv_epi16(_mm512_permutexvar_epi8(pairs_, _mm512_loadu_si512(slot)), shifts_);
    const __m512i magnitude = _mm512_and_si512(code, _mm512_set1_epi16(0x7FF));
    const __mmask32 normal = _mm512_test_epi16_mask(code, _mm512_set1_epi16(0x780));
    const __m512i rebased = _mm512_mask_add_epi16(magnitude, normal, magnitude, _mm512_set1_epi16(static_cast<int16_t>(base << 7)));
    return (__m512bh)_mm512_ternarylogic_epi32(rebased, _mm512_slli_epi16(code, 4),
                                               _mm512_set1_epi16(static_cast<int16_t>(0x8000)), 0xF8);  // a | (b & c)
  }

 private:
  const std::byte* exceptions_;
  __m512i pairs_, shifts_;
};

// Packed chunks this far ahead (4 KB) asked for while a decode step unpacks: the unpacking keeps
// the core from running far enough ahead on its own. A decode step's matrices of Llama-3.2-1B
// (2.47 GB of bf16 rows) on 2 cores of an AMD EPYC, against the bf16 rows' time, alternating: packed
// 0.85× (its bytes alone would give 0.77×), asking 1 KB ahead 0.83×, 2 KB 0.76×, 4 KB 0.76×.
constexpr int64_t kPackedPrefetchBytes = 4096;

// The kPackedRows rows of one packed chunk (bf16_pack.hpp) into wv, the chunk kPackedPrefetchBytes
// ahead asked for: decode's streaming loop and prefill's first token tile.
__attribute__((always_inline)) inline void unpack_chunk(const Unpacker& unpack, const std::byte* chunk,
                                                        __m512bh (&wv)[kPackedRows]) {
#pragma GCC unroll 4
  for (int64_t ahead = 0; ahead < kPackedChunkBytes; ahead += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(chunk + kPackedPrefetchBytes + ahead), _MM_HINT_T0);
  }
#pragma GCC unroll 4
  for (int r = 0; r < kPackedRows; ++r) {
    wv[r] = unpack.block(chunk + kPackedRows + r * kPackedSlotBytes, static_cast<uint8_t>(chunk[r]));
  }
}

// A tile's operands: rows from w (k values each) against tokens from x (padded_k bf16 values
// each, zero past k), summed into out[c·n + r] (=, or += with add). Packed rows (bf16_pack.hpp):
// the first token tile unpacks them from `packed` as it goes and stores them at `unpacked`, where
// w points, for the others (its unpacking runs beside its products).
struct TileArgs {
  const uint16_t* w;
  int64_t k;
  const uint16_t* x;
  int64_t padded_k;
  float* out;
  int64_t n;
  bool add;
  const std::byte* packed = nullptr;  // a tile of kPackedRows rows, or null: plain rows
  const Unpacker* unpack = nullptr;
  uint16_t* unpacked = nullptr;
};

// One chunk of 32 columns from col into the tile's sums: whole (a plain load; a masked one costs
// decode 12% of its bandwidth) or the row's last, loaded under a mask so nothing past it is read.
template <int R, int C, bool kPrefetch, bool kLast, bool kUnpack>
__attribute__((always_inline)) inline void chunk(__m512 (&acc)[R][C], const TileArgs& p, int64_t col) {
  const int64_t k = p.k;
  __m512bh wv[R];
  if constexpr (kUnpack) {  // packed rows: whole chunks (packable_bf16), kept for the next token tiles
    static_assert(R == kPackedRows && !kLast, "a packed tile is kPackedRows rows of whole chunks");
    unpack_chunk(*p.unpack, p.packed + col / kChunk * kPackedChunkBytes, wv);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) _mm512_store_si512(p.unpacked + r * k + col, (__m512i)wv[r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R && !kUnpack; ++r) {
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

template <int R, int C, bool kPrefetch, bool kUnpack>
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
  for (int64_t col = 0; col < whole; col += kChunk) chunk<R, C, kPrefetch, false, kUnpack>(acc, p, col);
  if constexpr (!kUnpack) {
    if (whole < p.k) chunk<R, C, kPrefetch, true, false>(acc, p, whole);
  }
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
// and asks for them ahead where more tiles follow (one token, decode, streams faster without), or
// unpacks them.
template <int R, int C>
void tile_at(TileArgs p, int64_t t, int64_t tokens) {
  p.x += t * p.padded_k;
  p.out += t * p.n;
  if constexpr (R == kPackedRows) {
    if (t == 0 && p.packed != nullptr) return tile<R, C, false, true>(p);
  }
  if (t == 0 && tokens > kTokens) return tile<R, C, true, false>(p);
  tile<R, C, false, false>(p);
}

// R rows against `tokens` tokens: whole tiles of kTokens, then one of the rest (token_tiles.hpp).
template <int R>
struct RowTile {
  const TileArgs& p;
  int64_t tokens;
  template <int C>
  void run(int64_t t) const {
    tile_at<R, C>(p, t, tokens);
  }
};

template <int R>
void rows_against(const TileArgs& p, int64_t tokens) {
  against_tokens<kTokens>(RowTile<R>{p, tokens}, tokens);
}

// Token t's k activations rounded to bf16 (nearest even) at x, zero up to padded_k.
void to_bf16(const float* in, int64_t k, int64_t padded_k, uint16_t* x) {
  for (int64_t c = 0; c < padded_k; c += 16) {
    const int64_t left = std::clamp<int64_t>(k - c, 0, 16);
    const __m512 v = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << left) - 1), in + c);
    _mm256_store_si256(reinterpret_cast<__m256i*>(x + c), (__m256i)_mm512_cvtneps_pbh(v));
  }
}

// 32 bf16 values, 64-byte aligned (vectors of them are aligned rows).
struct alignas(64) Chunk {
  uint16_t v[kChunk];
};

// The step's activations in bf16, rows of padded_k values (whole chunks): grown once, reused by
// every later call on this thread.
const uint16_t* bf16_activations(const float* in, int64_t k, int64_t padded_k, int64_t tokens) {
  thread_local std::vector<Chunk> act;
  const size_t chunks = static_cast<size_t>(tokens * padded_k / kChunk);
  if (act.size() < chunks) act.resize(chunks);
  uint16_t* const x = act.data()->v;
  parallel_for(tokens, 8, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) to_bf16(in + t * k, k, padded_k, x + t * padded_k);
  });
  return x;
}

// Tokens a row tile takes at a time: as many as keep their bf16 activations within kChunkBytes.
int64_t chunk_tokens_for(int64_t padded_k) { return std::max<int64_t>(kTokens, kChunkBytes / (2 * padded_k)); }

// One token: the tiles' rows unpacked as they stream, into the sums tile<kRows, 1> keeps.
void packed_one_token(const uint16_t* x, const std::byte* w, int64_t n, int64_t k, float* out, bool add) {
  const int64_t chunks = k / kChunk;
  parallel_for(n / kPackedRows, 1, [&](int64_t begin, int64_t end) {
    const Unpacker unpack(w + packed_bf16_chunks_bytes(n, k));
    for (int64_t t = begin; t < end; ++t) {
      const std::byte* chunk = w + t * chunks * kPackedChunkBytes;
      __m512 acc[kPackedRows];
#pragma GCC unroll 4
      for (int r = 0; r < kPackedRows; ++r) acc[r] = _mm512_setzero_ps();
      for (int64_t c = 0; c < chunks; ++c, chunk += kPackedChunkBytes) {
        __m512bh wv[kPackedRows];
        unpack_chunk(unpack, chunk, wv);
        const __m512bh xv = (__m512bh)_mm512_load_si512(x + c * kChunk);
#pragma GCC unroll 4
        for (int r = 0; r < kPackedRows; ++r) acc[r] = _mm512_dpbf16_ps(acc[r], wv[r], xv);
      }
#pragma GCC unroll 4
      for (int r = 0; r < kPackedRows; ++r) {
        const float v = _mm512_reduce_add_ps(acc[r]);
        float& o = out[t * kPackedRows + r];
        o = add ? o + v : v;
      }
    }
  });
}

}  // namespace

bool avx512_bf16_available() {
  static const bool available = has_avx512_bf16();
  return available;
}

bool packed_bf16_available() {
  static const bool available = avx512_bf16_available() && has_vbmi();
  return available;
}

void linear_bf16_avx512(const float* in, const uint16_t* w, int64_t n, int64_t k, float* out, int64_t tokens,
                        bool accumulate) {
  const int64_t padded_k = (k + kChunk - 1) / kChunk * kChunk;
  const uint16_t* const x = bf16_activations(in, k, padded_k, tokens);
  const int64_t chunk_tokens = chunk_tokens_for(padded_k);
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

void linear_bf16_packed_avx512(const float* in, const std::byte* w, int64_t n, int64_t k, float* out, int64_t tokens,
                               bool accumulate) {
  static_assert(kPackedRows == kRows && kPackedBlockValues == kChunk, "a packed tile is the kernel's row tile");
  const uint16_t* const x = bf16_activations(in, k, k, tokens);
  if (tokens == 1) return packed_one_token(x, w, n, k, out, accumulate);
  // More tokens: the bf16 kernel's tiles, the first of a row tile's chunk of tokens unpacking its
  // rows (into L1 / L2) for the others.
  const int64_t chunk_tokens = chunk_tokens_for(k), chunks = k / kChunk;
  parallel_for(n / kRows, 1, [&](int64_t begin, int64_t end) {
    const Unpacker unpack(w + packed_bf16_chunks_bytes(n, k));
    thread_local std::vector<Chunk> rows;
    rows.resize(static_cast<size_t>(kRows * chunks));
    for (int64_t t0 = 0; t0 < tokens; t0 += chunk_tokens) {
      for (int64_t t = begin; t < end; ++t) {
        const TileArgs p{rows.data()->v, k, x + t0 * k, k, out + t0 * n + t * kRows, n, accumulate,
                         w + t * chunks * kPackedChunkBytes, &unpack, rows.data()->v};
        rows_against<kRows>(p, std::min(chunk_tokens, tokens - t0));
      }
    }
  });
}

#else  // no AVX-512 off x86-64

bool avx512_bf16_available() { return false; }
bool packed_bf16_available() { return false; }

void linear_bf16_avx512(const float*, const uint16_t*, int64_t, int64_t, float*, int64_t, bool) {}
void linear_bf16_packed_avx512(const float*, const std::byte*, int64_t, int64_t, float*, int64_t, bool) {}

#endif

}  // namespace kiln::cpu
