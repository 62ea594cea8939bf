// Compiled with -mavx512f -mavx512bw -mavx512bf16 -mamx-tile -mamx-bf16 (CMakeLists.txt); run only
// where amx_bf16_available() says the processor and the kernel allow it.
#include "runtime/cpu/bf16_amx.hpp"

#include <algorithm>
#include <vector>

#include "runtime/core/parallel.hpp"
#include "runtime/cpu/amx_tiles.hpp"
#include "runtime/cpu/bf16_avx512.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::cpu {

#if defined(__x86_64__)

namespace {

constexpr int64_t kTile = 16;   // tokens of an activation tile, rows of a weight tile
constexpr int64_t kChunk = 32;  // columns one tile product takes (16 pairs)

// AMX-BF16, and AVX-512 F, BW and BF16 for the activations' conversion (bf16_avx512.hpp checks
// them), and the tiles granted.
bool request_tiles() {
  return ((cpuid7_edx() >> 22) & 1) != 0 && avx512_bf16_available() && amx_tiles_granted();
}

// Every tile 16 rows of 64 bytes: activations (16 tokens × 32 bf16), weights (16 column pairs ×
// 16 rows × 2 bf16) and sums (16 tokens × 16 rows fp32).
void load_tile_config() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = kTile;
  }
  _tile_loadconfig(&config);
}

// A 16 × 16 matrix of 32-bit elements, one row per register, transposed in place: 32-bit, then
// 64-bit interleaves within 128-bit lanes, then two rounds of 128-bit lane shuffles.
void transpose16(__m512i r[16]) {
  __m512i a[16], b[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // b[4i + j], 128-bit lane L: column 4L + j of rows 4i..4i+3
    b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {  // column 4L + j gathers lane L of b[j], b[4 + j], b[8 + j], b[12 + j]
    const __m512i c0 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x88), c1 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xDD);
    const __m512i c2 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x88), c3 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xDD);
    r[j] = _mm512_shuffle_i32x4(c0, c2, 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(c0, c2, 0xDD);
    r[4 + j] = _mm512_shuffle_i32x4(c1, c3, 0x88);
    r[12 + j] = _mm512_shuffle_i32x4(c1, c3, 0xDD);
  }
}

// The activation tiles of tokens t0..t0 + 15 (zero past `tokens`), each x split in two bf16
// parts hi = bf16(x) and lo = bf16(x - hi), rounded to nearest: column pair p's 16 tokens at
// hi[16·p] and lo[16·p] (32-bit words), for the padded k's pairs (zero past k).
void activation_tiles(const float* in, int64_t k, int64_t padded_k, int64_t t0, int64_t tokens, uint32_t* hi, uint32_t* lo) {
  thread_local std::vector<uint16_t> rows;  // 16 tokens' parts, row by row: hi, then lo
  rows.assign(static_cast<size_t>(2 * kTile * padded_k), 0);
  for (int64_t m = 0; m < kTile && t0 + m < tokens; ++m) {
    const float* x = in + (t0 + m) * k;
    uint16_t* h = rows.data() + m * padded_k;
    uint16_t* l = h + kTile * padded_k;
    for (int64_t c = 0; c < padded_k; c += 16) {
      const int64_t left = std::clamp<int64_t>(k - c, 0, 16);
      const __m512 v = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << left) - 1), x + c);
      const __m256i part = (__m256i)_mm512_cvtneps_pbh(v);
      const __m512 back = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(part), 16));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + c), part);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(l + c), (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(v, back)));
    }
  }
  for (int part = 0; part < 2; ++part) {
    const uint16_t* src = rows.data() + part * kTile * padded_k;
    uint32_t* dst = part == 0 ? hi : lo;
    for (int64_t p0 = 0; p0 < padded_k / 2; p0 += kTile) {
      __m512i v[16];
      for (int64_t m = 0; m < kTile; ++m) v[m] = _mm512_loadu_si512(src + m * padded_k + 2 * p0);
      transpose16(v);
      for (int64_t j = 0; j < kTile; ++j) _mm512_storeu_si512(dst + (p0 + j) * kTile, v[j]);
    }
  }
}

}  // namespace

bool amx_bf16_available() {
  static const bool available = request_tiles();
  return available;
}

void linear_bf16_amx(const float* in, const uint16_t* w, int64_t n, int64_t k, float* out, int64_t tokens, bool accumulate) {
  const int64_t padded_k = (k + kChunk - 1) / kChunk * kChunk, token_tiles = (tokens + kTile - 1) / kTile;
  const int64_t tile_words = padded_k / 2 * kTile;  // of one token tile's hi (or lo)
  // The step's activation tiles: grown once, reused by every later call on this thread.
  thread_local std::vector<uint32_t> act;
  if (static_cast<int64_t>(act.size()) < 2 * token_tiles * tile_words) act.resize(static_cast<size_t>(2 * token_tiles * tile_words));
  uint32_t* const hi = act.data();
  uint32_t* const lo = hi + token_tiles * tile_words;
  parallel_for(token_tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) activation_tiles(in, k, padded_k, kTile * j, tokens, hi + j * tile_words, lo + j * tile_words);
  });
  // The weights are the tiles' first operand as they are stored (16 rows of 32 columns, 2·k bytes
  // apart), the activations the second; a sum tile is 16 rows × 16 tokens. Two groups of 16 rows
  // against two token tiles at a time: sum tiles 0..3, weight tiles 4 and 5, hi and lo 6 and 7.
  // Rows past n and columns past k (a last row's last chunk would read past the matrix) come from
  // a zero-padded copy.
  const bool whole_chunks = k % kChunk == 0;
  parallel_for((n + 2 * kTile - 1) / (2 * kTile), 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<uint16_t> padded;
    alignas(64) float sums[4][kTile][kTile];
    load_tile_config();
    for (int64_t u = begin; u < end; ++u) {
      const int64_t r0 = 2 * kTile * u;
      const uint16_t* a = w + r0 * k;
      int64_t a_stride = 2 * k;
      if (!whole_chunks || r0 + 2 * kTile > n) {
        padded.assign(static_cast<size_t>(2 * kTile * padded_k), 0);
        for (int64_t r = 0; r < 2 * kTile && r0 + r < n; ++r) std::copy_n(w + (r0 + r) * k, k, padded.data() + r * padded_k);
        a = padded.data();
        a_stride = 2 * padded_k;
      }
      const uint16_t* a1 = a + kTile * (a_stride / 2);
      for (int64_t j = 0; j < token_tiles; j += 2) {
        const bool second = j + 1 < token_tiles;  // one token tile for 16 tokens or fewer (decode)
        const uint32_t* h0 = hi + j * tile_words;
        const uint32_t* l0 = lo + j * tile_words;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t c = 0; c < padded_k; c += kChunk) {
          _tile_loadd(4, a + c, a_stride);
          _tile_loadd(5, a1 + c, a_stride);
          _tile_loadd(6, h0 + c / 2 * kTile, 64);
          _tile_loadd(7, l0 + c / 2 * kTile, 64);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 5, 6);
          _tile_dpbf16ps(0, 4, 7);
          _tile_dpbf16ps(1, 5, 7);
          if (second) {
            _tile_loadd(6, h0 + tile_words + c / 2 * kTile, 64);
            _tile_loadd(7, l0 + tile_words + c / 2 * kTile, 64);
            _tile_dpbf16ps(2, 4, 6);
            _tile_dpbf16ps(3, 5, 6);
            _tile_dpbf16ps(2, 4, 7);
            _tile_dpbf16ps(3, 5, 7);
          }
        }
        _tile_stored(0, sums[0], 64);
        _tile_stored(1, sums[1], 64);
        _tile_stored(2, sums[2], 64);
        _tile_stored(3, sums[3], 64);
        for (int s = 0; s < (second ? 4 : 2); ++s) {  // sum tile s: row group s % 2, token tile j + s / 2
          const int64_t rg = r0 + kTile * (s % 2), rows = std::clamp<int64_t>(n - rg, 0, kTile);
          if (rows == 0) continue;
          const __mmask16 valid = static_cast<__mmask16>((1u << rows) - 1);
          __m512i v[16];
          for (int m = 0; m < kTile; ++m) v[m] = _mm512_load_si512(sums[s][m]);
          transpose16(v);  // row m of the tile is now token m
          for (int64_t m = 0; m < kTile; ++m) {
            const int64_t t = kTile * (j + s / 2) + m;
            if (t >= tokens) break;
            float* o = out + t * n + rg;
            __m512 sum = _mm512_castsi512_ps(v[m]);
            if (accumulate) sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(valid, o));
            _mm512_mask_storeu_ps(o, valid, sum);
          }
        }
      }
    }
    _tile_release();
  });
}

#else  // no AMX off x86-64

bool amx_bf16_available() { return false; }

void linear_bf16_amx(const float*, const uint16_t*, int64_t, int64_t, float*, int64_t, bool) {}

#endif

}  // namespace kiln::cpu
