// bf16 rows packed losslessly into 12 bits a value (MatrixFormat::bf16_packed), the fast CPU
// backend's form of a bf16 projection where its kernel can unpack them (runtime/cpu/bf16_avx512).
// A CPU decode step is bound by memory bandwidth, and a bf16 matrix's exponents say little: the 32
// values of a row's block mostly lie within 15 binades of the largest (weights of one scale), so a
// block keeps each value's sign, 7 mantissa bits and its exponent as 4 bits above the block's base;
// 196 bytes stand for 256 (0.766 of the bytes; bench/RESULTS.md, 2026-11-28 fourteenth session).
//
// The format is the fast CPU backend's alone (the GPU's bf16 GEMV is compute-light enough to read
// plain rows at its bandwidth, and its memory holds them as the file does).
//
// Layout of an [n, k] matrix (n a multiple of kPackedRows, k of 32): row tiles of kPackedRows rows,
// each tile's k / 32 chunks in column order, a chunk of kPackedChunkBytes:
//   4 header bytes, one per row of the tile: the block's base exponent b (at most 240), or kRawBlock
//   4 × 48 bytes, one slot per row: the 32 values' 12-bit codes, two values in 3 bytes (value 2j
//     in bits 0..11 of bytes 3j, 3j + 1 read little-endian, value 2j + 1 in bits 4..15 of bytes
//     3j + 1, 3j + 2); code = sign << 11 | e4 << 7 | mantissa, where e4 = 0 keeps the exponent 0
//     (zeros and subnormals) and e4 = 1..15 stands for the exponent b + e4
// Then the exceptions: the blocks whose nonzero exponents do not lie within b + 1..b + 15 for one b,
// 64 bytes each (their bf16 values as stored); such a block's header is kRawBlock and its slot
// begins with its index among the exceptions (uint32). A matrix is packed only where all of that
// fits in its bf16 bytes (pack_bf16 says), so it takes the allocation of its bf16 rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln {

constexpr int kPackedRows = 4;                         // rows of a tile (the CPU kernel's row tile)
constexpr int kPackedBlockValues = 32;                 // values of a block (one vdpbf16ps)
constexpr int kPackedSlotBytes = 48;                   // 32 codes of 12 bits
constexpr int kPackedChunkBytes = kPackedRows * (1 + kPackedSlotBytes);  // 196
constexpr int kPackedRawBytes = 2 * kPackedBlockValues;                  // an exception: 64
constexpr uint8_t kRawBlock = 0xFF;

// Whether an [n, k] matrix has the shape the layout takes.
constexpr bool packable_bf16(int64_t n, int64_t k) {
  return n > 0 && k > 0 && n % kPackedRows == 0 && k % kPackedBlockValues == 0;
}

// Bytes of the chunks (where the exceptions begin).
constexpr int64_t packed_bf16_chunks_bytes(int64_t n, int64_t k) {
  return n / kPackedRows * (k / kPackedBlockValues) * kPackedChunkBytes;
}

// Packs the [n, k] bf16 rows `rows` (packable_bf16) into `out`; returns its bytes (chunks and
// exceptions), or 0 where that would not be fewer than the rows' 2·n·k (out is then unspecified).
// Rows of tiles go over the cores (parallel_for). Only where packed_bf16_available()
// (bf16_avx512.hpp): this file is compiled for AVX-512 VBMI, as the kernel that unpacks is.
int64_t pack_bf16(const uint16_t* rows, int64_t n, int64_t k, std::vector<std::byte>& out);

// Row r's k values as bf16 bits, from a packed [n, k] matrix (a tied LM head's embedding lookups,
// and tests).
void unpack_bf16_row(const std::byte* matrix, int64_t n, int64_t k, int64_t r, uint16_t* values);

}  // namespace kiln
