// Compiled with the AVX-512 VNNI file's flags and -mamx-tile -mamx-int8 (CMakeLists.txt); run only
// where amx_int8_available(). quant_dot_impl.hpp comes in as this file's own copy (namespace
// amx_int8): its unpacking and scales feed the tiles, and its VNNI tiles take the tokens short of a
// whole tile, so that both are one source with the AVX-512 VNNI kernel's.
#include "runtime/cpu/quant_amx.hpp"

#include <memory>

#include "runtime/cpu/amx_tiles.hpp"

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
// 16 tokens' high and low parts (16 rows of 32 bytes, straight from their Q8Blocks).
void load_tile_config() {
  TileConfig config;
  config.rows[0] = config.rows[1] = kAmxTileTokens;
  config.colsb[0] = config.colsb[1] = 64;
  config.rows[2] = 8;
  config.colsb[2] = 64;
  config.rows[3] = config.rows[4] = kAmxTileTokens;
  config.colsb[3] = config.colsb[4] = kQuantBlockValues;
  _tile_loadconfig(&config);
}

// A block of a group as the tiles and the fp32 steps take it: its quants as signed values
// s = u - offset (as the records' vectors: lane r of vector j row r's columns 4j..4j+3), the 16
// rows' scales and mins.
struct alignas(64) GroupBlock {
  __m512i quants[8];
  float scale[kCpuRowGroup];
  float min[kCpuRowGroup];
};

// Group g's rows against `tiles` whole tiles of 16 tokens. Per block, two tile products (TDPBSSD:
// signed bytes, int32 sums) give Σ s·q and Σ s·lo, and (Σ s·q << 7) + Σ s·lo is VNNI's integer
// (hi << 7) + lo - offset · total, Σ (u - offset)·(128·q + lo), exactly; each token's sums then
// take the AVX-512 VNNI tile_blocks' fp32 steps, lanes the rows as there: converted, times
// scale · step, added (and min · Σx).
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
    _mm512_store_ps(s.scale, block_scales<F>(rec, hdr));
    if constexpr (cpu_has_min(F)) _mm512_store_ps(s.min, block_mins<F>(rec, hdr));
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
      _tile_zero(0);
      _tile_zero(1);
      _tile_loadd(2, s.quants, 64);
      _tile_loadd(3, x[b].q, x_stride);
      _tile_loadd(4, x[b].lo, x_stride);
      _tile_dpbssd(0, 3, 2);
      _tile_dpbssd(1, 4, 2);
      alignas(64) int32_t hi[kAmxTileTokens][kCpuRowGroup], lo[kAmxTileTokens][kCpuRowGroup];
      _tile_stored(0, hi, 64);
      _tile_stored(1, lo, 64);
      const __m512 scale = _mm512_load_ps(s.scale);
      __m512 min = _mm512_setzero_ps();
      if constexpr (cpu_has_min(F)) min = _mm512_load_ps(s.min);
#pragma GCC unroll 16
      for (int m = 0; m < kAmxTileTokens; ++m) {
        const Q8Block& xb = x[m * a.act_stride + b];
        const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(hi[m]), 7), _mm512_load_si512(lo[m]));
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(scale, _mm512_set1_ps(xb.step)), acc[m]);
        if constexpr (cpu_has_min(F)) acc[m] = _mm512_fmadd_ps(min, _mm512_set1_ps(xb.sum), acc[m]);
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
    load_tile_config();
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
    default: return run(format, a);  // the rest: the VNNI kernel's (amx_int8_takes says which)
  }
}

}  // namespace amx_int8

bool amx_int8_available() {
  static const bool available = ((cpuid7_edx() >> 25) & 1) != 0 && dot_kernel_avx512_vnni() != nullptr && amx_tiles_granted();
  return available;
}

DotKernel dot_kernel_amx_int8() { return amx_int8_available() ? &amx_int8::run_amx : nullptr; }

#else

bool amx_int8_available() { return false; }
DotKernel dot_kernel_amx_int8() { return nullptr; }

#endif

bool amx_int8_takes(MatrixFormat f) { return is_cpu_block_format(f) && !has_half_block_scales(f); }

}  // namespace kiln::cpu
