// A projection weight as the GPU holds it: bf16 rows, or a GGUF block format kept quantized
// (Q8_0, Q4_0) in a layout the decode GEMV streams with 16-byte loads (linear_quant.cuh). The
// loader chooses per tensor and layer (runtime/model/weight_loader.cpp): a binary runs whatever
// mix of these formats its file holds, so one build serves every quantization of the model.
//
// Quantized layout of an [n, k] matrix: k is cut into blocks of 32 values (ggml's blocks, same
// values and fp16 scales) and the blocks of a row into groups of kGroupBlocks (a group is 64
// quant bytes: 4 lanes × 16 bytes). Row r's group s holds, for lane q = 0..3, the quants of
// columns 8q..8q+7 of each of its blocks:
//   q8_0 (2 blocks a group)  lane q: block 0's 8 int8, then block 1's 8 int8
//   q4_0 (4 blocks a group)  lane q: one 32-bit word per block; its 8 nibbles (ggml's 0..15,
//                            value = (nibble - 8) · scale) are columns 8q + 2p at bits 4p..4p+3
//                            and 8q + 2p + 1 at bits 16 + 4p..16 + 4p + 3 (p = 0..3), so that
//                            (word >> 4p) & 0x000F000F is the pair (8q + 2p, 8q + 2p + 1)
// Then the scales: [n][groups · kGroupBlocks] fp16. Blocks past k (the last group of a row whose
// block count is not a multiple of kGroupBlocks) hold zero quants and a zero scale.
//
// Plain C++ (no includes but host_device.hpp): nvcc, NVRTC, kilnc and the loader all read it.
#pragma once

#include "templates/host_device.hpp"

namespace kiln {

enum class MatrixFormat : unsigned char { bf16, q8_0, q4_0 };

struct GpuMatrix {
  const void* data = nullptr;
  MatrixFormat format = MatrixFormat::bf16;
};

// The field type of a projection weight in a generated Weights<T>: fp32 rows in the CPU
// reference, a GpuMatrix on the GPU.
template <typename T>
struct MatrixOf {
  using type = GpuMatrix;
};
template <>
struct MatrixOf<float> {
  using type = const float*;
};
template <typename T>
using Matrix = typename MatrixOf<T>::type;

constexpr int kQuantBlockValues = 32;  // values per block (ggml's QK8_0, QK4_0)
constexpr int kQuantGroupBytes = 64;   // quant bytes of one row's group: 4 lanes × 16 bytes

KILN_HOST_DEVICE constexpr int quant_group_blocks(MatrixFormat f) { return f == MatrixFormat::q4_0 ? 4 : 2; }

// Groups per row of k values.
KILN_HOST_DEVICE constexpr long long quant_row_groups(MatrixFormat f, long long k) {
  const long long blocks = (k + kQuantBlockValues - 1) / kQuantBlockValues;
  return (blocks + quant_group_blocks(f) - 1) / quant_group_blocks(f);
}

// Bytes of the quants of all n rows: the scales start there.
KILN_HOST_DEVICE constexpr long long quant_scales_offset(MatrixFormat f, long long n, long long k) {
  return n * quant_row_groups(f, k) * kQuantGroupBytes;
}

// Bytes an [n, k] matrix takes on the GPU in format f.
KILN_HOST_DEVICE constexpr long long matrix_bytes(MatrixFormat f, long long n, long long k) {
  if (f == MatrixFormat::bf16) return n * k * 2;
  return quant_scales_offset(f, n, k) + n * quant_row_groups(f, k) * quant_group_blocks(f) * 2;
}

}  // namespace kiln
