// The grid of MLA's per-head tile GEMMs (mla_q_absorb, mla_v_up at prefill): blockIdx.z is the
// head (the GEMM group), blockIdx.y a tile of 64 tokens.
#pragma once

#include "templates/common.cuh"

namespace kiln::detail {

// The grid of both per-head TileGemm problems: blockIdx.z is the head (the GEMM group), blockIdx.y
// a tile of 64 tokens.
struct PerHeadTokenTiles {
  template <typename Args>
  __device__ static bool locate(const Args& a, int& group, int& m0, int& rows) {
    group = blockIdx.z;
    m0 = blockIdx.y * 64;
    rows = min(64, a.tokens - m0);
    return rows > 0;
  }
};

}  // namespace kiln::detail
