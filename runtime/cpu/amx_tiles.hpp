// What the AMX kernels (bf16_amx.cpp, quant_amx.cpp) share: Linux's grant of the tile registers,
// and the tile configuration's bytes.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// Whether the processor has AMX tiles (CPUID leaf 7: AMX-TILE) and Linux lets this process use
// them: it hands AMX's 8 KB of tile registers over only on request (arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); without it the first tile instruction is fatal.
// Asked once.
bool amx_tiles_granted();

// CPUID leaf 7's EDX (0 where there is none, or off x86-64): AMX-BF16 is bit 22, AMX-INT8 bit 25.
uint32_t cpuid7_edx();

// The 64 bytes _tile_loadconfig reads (palette 1): each tile's rows and bytes a row.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace kiln::cpu
