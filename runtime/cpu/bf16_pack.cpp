// Compiled with AVX-512 F, BW and VBMI (CMakeLists.txt): packing runs only where the kernel that
// unpacks runs (packed_bf16_available), and the compiler's vectors of the exponent pass and the
// slot writer's byte permutation make it fast (Llama-3.2-1B's 2.47 GB of bf16 rows: 0.85 s more
// to load in portable code, 0.5 s so).
#include "runtime/cpu/bf16_pack.hpp"

#include <algorithm>
#include <cstring>

#include "runtime/core/parallel.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln {

namespace {

int exponent(uint16_t v) { return (v >> 7) & 0xFF; }

// The block's base exponent, or kRawBlock where its nonzero exponents span more than 15 binades.
uint8_t block_base(const uint16_t* v) {
  int top = 0, low = 0xFF;  // the largest exponent, and the smallest but 0 (0xFF: none)
  for (int i = 0; i < kPackedBlockValues; ++i) {
    const int e = exponent(v[i]);
    top = std::max(top, e);
    low = std::min(low, e == 0 ? 0xFF : e);
  }
  const int base = std::max(0, top - 15);
  return low > base ? static_cast<uint8_t>(base) : kRawBlock;
}

#if defined(__x86_64__)
// The byte permutation that keeps the low 3 bytes of each of 16 32-bit lanes: 48 bytes.
struct SlotGather {
  alignas(64) uint8_t index[64] = {};
  constexpr SlotGather() {
    for (int j = 0; j < 16; ++j) {
      for (int b = 0; b < 3; ++b) index[3 * j + b] = static_cast<uint8_t>(4 * j + b);
    }
  }
};
constexpr SlotGather kSlotGather;

// The block's 32 codes (bf16_pack.hpp) into its 48-byte slot: the codes in 16-bit lanes (sign from
// bit 15 to 11, the exponent less the base where it is not 0, the mantissa), each pair of lanes made
// one 24-bit value (a | b << 12) in its 32-bit lane, and those lanes' low 3 bytes gathered.
void write_slot(const uint16_t* v, int base, std::byte* slot) {
  const __m512i bits = _mm512_loadu_si512(v);
  const __m512i e = _mm512_and_si512(_mm512_srli_epi16(bits, 7), _mm512_set1_epi16(0xFF));
  const __mmask32 nonzero = _mm512_test_epi16_mask(e, e);
  const __m512i e4 = _mm512_maskz_sub_epi16(nonzero, e, _mm512_set1_epi16(static_cast<int16_t>(base)));
  const __m512i sign_mantissa = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(bits, 4), _mm512_set1_epi16(0x800)),
                                                _mm512_and_si512(bits, _mm512_set1_epi16(0x7F)));
  const __m512i code = _mm512_or_si512(sign_mantissa, _mm512_slli_epi16(e4, 7));
  const __m512i pairs = _mm512_or_si512(_mm512_and_si512(code, _mm512_set1_epi32(0xFFF)),
                                        _mm512_and_si512(_mm512_srli_epi32(code, 4), _mm512_set1_epi32(0xFFF000)));
  const __m512i packed = _mm512_permutexvar_epi8(_mm512_load_si512(kSlotGather.index), pairs);
  _mm512_mask_storeu_epi8(slot, (__mmask64{1} << kPackedSlotBytes) - 1, packed);
}
#else
void write_slot(const uint16_t*, int, std::byte*) {}  // never called: packed_bf16_available() is false
#endif

}  // namespace

int64_t pack_bf16(const uint16_t* rows, int64_t n, int64_t k, std::vector<std::byte>& out) {
  const int64_t tiles = n / kPackedRows, chunks = k / kPackedBlockValues;
  // First every block's base, and the exceptions of each tile, so that each tile knows where its
  // own go.
  std::vector<uint8_t> bases(static_cast<size_t>(n * chunks));
  std::vector<int64_t> raw_before(static_cast<size_t>(tiles) + 1, 0);
  parallel_for(tiles, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t raw = 0;
      for (int64_t r = t * kPackedRows; r < (t + 1) * kPackedRows; ++r) {
        for (int64_t c = 0; c < chunks; ++c) {
          const uint8_t base = block_base(rows + r * k + c * kPackedBlockValues);
          bases[static_cast<size_t>(r * chunks + c)] = base;
          raw += base == kRawBlock;
        }
      }
      raw_before[static_cast<size_t>(t) + 1] = raw;
    }
  });
  for (int64_t t = 0; t < tiles; ++t) raw_before[t + 1] += raw_before[t];
  const int64_t exceptions_at = packed_bf16_chunks_bytes(n, k);
  const int64_t bytes = exceptions_at + raw_before[tiles] * kPackedRawBytes;
  if (bytes >= 2 * n * k) return 0;
  out.resize(static_cast<size_t>(bytes));
  std::byte* const chunks_out = out.data();
  std::byte* const exceptions = out.data() + exceptions_at;
  parallel_for(tiles, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      auto index = static_cast<uint32_t>(raw_before[t]);
      for (int64_t c = 0; c < chunks; ++c) {
        std::byte* chunk = chunks_out + (t * chunks + c) * kPackedChunkBytes;
        for (int r = 0; r < kPackedRows; ++r) {
          const uint16_t* v = rows + (t * kPackedRows + r) * k + c * kPackedBlockValues;
          std::byte* slot = chunk + kPackedRows + r * kPackedSlotBytes;
          const uint8_t base = bases[static_cast<size_t>((t * kPackedRows + r) * chunks + c)];
          chunk[r] = std::byte(base);
          if (base != kRawBlock) {
            write_slot(v, base, slot);
            continue;
          }
          std::memset(slot, 0, kPackedSlotBytes);
          std::memcpy(slot, &index, sizeof(index));
          std::memcpy(exceptions + int64_t{index} * kPackedRawBytes, v, kPackedRawBytes);
          ++index;
        }
      }
    }
  });
  return bytes;
}

void unpack_bf16_row(const std::byte* matrix, int64_t n, int64_t k, int64_t r, uint16_t* values) {
  const int64_t t = r / kPackedRows, lane = r % kPackedRows, chunks = k / kPackedBlockValues;
  const std::byte* exceptions = matrix + packed_bf16_chunks_bytes(n, k);
  for (int64_t c = 0; c < chunks; ++c) {
    const std::byte* chunk = matrix + (t * chunks + c) * kPackedChunkBytes;
    const std::byte* slot = chunk + kPackedRows + lane * kPackedSlotBytes;
    uint16_t* v = values + c * kPackedBlockValues;
    const auto base = static_cast<uint8_t>(chunk[lane]);
    if (base == kRawBlock) {
      uint32_t index = 0;
      std::memcpy(&index, slot, sizeof(index));
      std::memcpy(v, exceptions + int64_t{index} * kPackedRawBytes, kPackedRawBytes);
      continue;
    }
    for (int i = 0; i < kPackedBlockValues; ++i) {
      const int at = 3 * (i / 2) + (i & 1);
      const int word = static_cast<int>(slot[at]) | static_cast<int>(slot[at + 1]) << 8;
      const int code = (i & 1 ? word >> 4 : word) & 0xFFF;
      const int e4 = (code >> 7) & 0xF;
      v[i] = static_cast<uint16_t>((code >> 11) << 15 | (e4 == 0 ? 0 : base + e4) << 7 | (code & 0x7F));
    }
  }
}

}  // namespace kiln
