// Compiled with the AVX-512 VNNI file's flags and -mamx-tile -mamx-int8 (CMakeLists.txt); run only
// where amx_int8_available() (quant_dot.cpp, compiled for any x86-64, decides). quant_dot_impl.hpp
// comes in as this file's own copy (namespace amx_int8): its unpacking and scales feed the tiles,
// its add_block takes their sums, and its VNNI tiles take the tokens short of a whole tile, so that
// both are one source with the AVX-512 VNNI kernel's.
#include "runtime/cpu/quant_amx.hpp"

#include <memory>

#include "runtime/cpu/amx_tiles.hpp"  // TileConfig

#if defined(__x86_64__)
#define KILN_DOT_SIMD 2
#else  // never chosen there (amx_int8_available)
#define KILN_DOT_SIMD 0
#endif
#define KILN_DOT_NS amx_int8
#include "runtime/cpu/quant_dot_impl.hpp"

namespace kiln::cpu {

#if KILN_DOT_SIMD == 2

namespace amx_int8 {

constexpr int64_t kAmxTileTokens = 16;  // an activation tile's rows; a block tile's columns are a group's 16 rows

// Tiles 0 and 1: a block's sums against the activations' high and low parts (16 tokens × 16 rows
// of int32); 2: the block's signed quants (8 rows of 64 bytes: GroupBlock::quants); 3 and 4: the
// 16 tokens' high and low parts (16 rows of 32 bytes, straight from their Q8Blocks). Where a scale
// is per 16 values (Q2_K, Q3_K, Q6_K), each half of the block apart: sums 0, 1 of the first half
// and 5, 6 of the second, its quants (4 rows) in 2 and 7, its parts (16 bytes a row) in 3 and 4.
template <MatrixFormat F>
void load_tile_config() {
  constexpr int kColumns = kHalfScales<F> ? kQuantBlockValues / 2 : kQuantBlockValues;
  constexpr int kSums[] = {0, 1, 5, 6}, kQuants[] = {2, 7};  // arrays, not std::initializer_list (quant_dot_impl.hpp)
  TileConfig config;
  for (const int sums : kSums) {
    config.rows[sums] = kAmxTileTokens;
    config.colsb[sums] = 64;
  }
  for (const int quants : kQuants) {
    config.rows[quants] = kColumns / 4;
    config.colsb[quants] = 64;
  }
  config.rows[3] = config.rows[4] = kAmxTileTokens;
  config.colsb[3] = config.colsb[4] = kColumns;
  _tile_loadconfig(&config);
}

// A block of a group as the tiles and the fp32 steps take it: its quants as signed values
// s = u - offset (as the records' vectors: lane r of vector j row r's columns 4j..4j+3), the 16
// rows' scales and mins.
struct alignas(64) GroupBlock {
  __m512i quants[8];
  float scale[2][kCpuRowGroup];  // of the block, or of each half (kHalfScales)
  float min[2][kCpuRowGroup];
};

// A block's integer sums for 16 tokens from x (their Q8Blocks of the block, x_stride bytes apart):
// sums[0] = Σ s·q and sums[1] = Σ s·lo over the block, or (kHalfScales) over its first half, and
// sums[2], sums[3] over the second.
template <MatrixFormat F>
inline void block_products(const GroupBlock& s, const Q8Block& x, int64_t x_stride, int32_t (*sums)[kAmxTileTokens][kCpuRowGroup]) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_loadd(2, s.quants, 64);
  _tile_loadd(3, x.q, x_stride);
  _tile_loadd(4, x.lo, x_stride);
  _tile_dpbssd(0, 3, 2);
  _tile_dpbssd(1, 4, 2);
  if constexpr (kHalfScales<F>) {  // columns 16..31: quant vectors 4..7
    constexpr int kHalf = kQuantBlockValues / 2;
    _tile_zero(5);
    _tile_zero(6);
    _tile_loadd(7, s.quants + 4, 64);
    _tile_loadd(3, x.q + kHalf, x_stride);
    _tile_loadd(4, x.lo + kHalf, x_stride);
    _tile_dpbssd(5, 3, 7);
    _tile_dpbssd(6, 4, 7);
  }
  _tile_stored(0, sums[0], 64);
  _tile_stored(1, sums[1], 64);
  if constexpr (kHalfScales<F>) {
    _tile_stored(5, sums[2], 64);
    _tile_stored(6, sums[3], 64);
  }
}

// Group g's rows against `tiles` whole tiles of 16 tokens. Per block (or half, where a scale is
// per 16 values), two tile products (TDPBSSD: signed bytes, int32 sums) give Σ s·q and Σ s·lo, and
// (Σ s·q << 7) + Σ s·lo is VNNI's integer (hi << 7) + lo - offset · total, Σ (u - offset)·(128·q +
// lo), exactly; add_block then takes each token's sums through the VNNI kernel's fp32 steps, lanes
// the rows as there.
template <MatrixFormat F>
void group_tiles(const DotArgs& a, int64_t g, int64_t tiles) {
  const int64_t blocks = a.k / kQuantBlockValues;
  const std::byte* w = a.w + g * a.stride;
  thread_local std::unique_ptr<GroupBlock[]> scratch;
  thread_local int64_t capacity = 0;
  if (capacity < blocks) scratch.reset(new GroupBlock[static_cast<size_t>(capacity = blocks)]);
  for (int64_t b = 0; b < blocks; ++b) {
    const std::byte *rec = record<F>(w, b), *hdr = header<F>(w, b);
    prefetch_ahead<kBlockStream<F>>(rec);
    GroupBlock& s = scratch[b];
    unpack<F>(rec, s.quants);
    for (__m512i& v : s.quants) v = _mm512_sub_epi8(v, _mm512_set1_epi8(static_cast<char>(kQuantOffset<F>)));
    for (int h = 0; h < (kHalfScales<F> ? 2 : 1); ++h) {
      _mm512_store_ps(s.scale[h], block_scales<F>(rec, hdr, h));
      if constexpr (cpu_has_min(F)) _mm512_store_ps(s.min[h], block_mins<F>(rec, hdr, h));
    }
  }
  const int64_t x_stride = a.act_stride * static_cast<int64_t>(sizeof(Q8Block));  // bytes from token to token
  const int64_t rows = a.rows - g * kCpuRowGroup;
  const __mmask16 valid = rows >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << rows) - 1);
  for (int64_t j = 0; j < tiles; ++j) {
    const Q8Block* x = static_cast<const Q8Block*>(a.x) + j * kAmxTileTokens * a.act_stride;
    __m512 acc[kAmxTileTokens];
#pragma GCC unroll 16
    for (int m = 0; m < kAmxTileTokens; ++m) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      const GroupBlock& s = scratch[b];
      alignas(64) int32_t sums[4][kAmxTileTokens][kCpuRowGroup];  // hi, lo (of each half)
      block_products<F>(s, x[b], x_stride, sums);
      constexpr int kHalves = kHalfScales<F> ? 2 : 1;
      __m512 scale[kHalves], min[kHalves];
      for (int h = 0; h < kHalves; ++h) {
        scale[h] = _mm512_load_ps(s.scale[h]);
        min[h] = _mm512_setzero_ps();
        if constexpr (cpu_has_min(F)) min[h] = _mm512_load_ps(s.min[h]);
      }
#pragma GCC unroll 16
      for (int m = 0; m < kAmxTileTokens; ++m) {
        __m512i sum[kHalves];
        for (int h = 0; h < kHalves; ++h) {
          sum[h] = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(sums[2 * h][m]), 7), _mm512_load_si512(sums[2 * h + 1][m]));
        }
        acc[m] = add_block<F>(acc[m], sum, scale, min, x[m * a.act_stride + b]);
      }
    }
#pragma GCC unroll 16
    for (int m = 0; m < kAmxTileTokens; ++m) {
      float* o = a.out + (j * kAmxTileTokens + m) * a.out_stride + g * kCpuRowGroup;
      __m512 v = acc[m];
      if (a.accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(valid, o));
      _mm512_mask_storeu_ps(o, valid, v);
    }
  }
}

// Whole tiles of 16 tokens on the tiles, the rest on this file's copy of the VNNI kernel.
template <MatrixFormat F>
void run_tiles(const DotArgs& a) {
  const int64_t tiles = a.tokens / kAmxTileTokens;
  if (tiles > 0) {
    load_tile_config<F>();
    for (int64_t g = 0; g * kCpuRowGroup < a.rows; ++g) group_tiles<F>(a, g, tiles);
    _tile_release();
  }
  if (a.tokens % kAmxTileTokens == 0) return;
  DotArgs rest = a;
  rest.x = static_cast<const Q8Block*>(a.x) + tiles * kAmxTileTokens * a.act_stride;
  rest.out = a.out + tiles * kAmxTileTokens * a.out_stride;
  rest.tokens = a.tokens % kAmxTileTokens;
  run_blocks<F>(rest);
}

void run_amx(MatrixFormat format, const DotArgs& a) {
  switch (format) {
    case MatrixFormat::q8_0: return run_tiles<MatrixFormat::q8_0>(a);
    case MatrixFormat::q4_0: return run_tiles<MatrixFormat::q4_0>(a);
    case MatrixFormat::q4_1: return run_tiles<MatrixFormat::q4_1>(a);
    case MatrixFormat::q5_0: return run_tiles<MatrixFormat::q5_0>(a);
    case MatrixFormat::q5_1: return run_tiles<MatrixFormat::q5_1>(a);
    case MatrixFormat::q4_k: return run_tiles<MatrixFormat::q4_k>(a);
    case MatrixFormat::q5_k: return run_tiles<MatrixFormat::q5_k>(a);
    case MatrixFormat::q2_k: return run_tiles<MatrixFormat::q2_k>(a);
    case MatrixFormat::q3_k: return run_tiles<MatrixFormat::q3_k>(a);
    case MatrixFormat::q6_k: return run_tiles<MatrixFormat::q6_k>(a);
    default: return run(format, a);  // bf16 rows: the VNNI kernel's loop (linear.cpp sends none)
  }
}

}  // namespace amx_int8

DotKernel dot_kernel_amx_int8_impl() { return &amx_int8::run_amx; }

#else

DotKernel dot_kernel_amx_int8_impl() { return nullptr; }

#endif

}  // namespace kiln::cpu
