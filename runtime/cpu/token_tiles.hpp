// The CPU kernels' loop over tokens (quant_dot_impl.hpp's block and bf16 tiles, bf16_avx512.cpp's):
// a tile's rows against whole tiles of kTokens tokens, then one tile of exactly the rest, so that
// every tile size is a compile-time constant (its sums stay in registers).
//
// Tile::run<C>(t) runs the tile of C tokens from token t. Each kernel file's Tile is a type of its
// own (its instruction set's namespace, or its file's anonymous one), so an instantiation here is
// never one symbol shared by files compiled for different instruction sets.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// The last `left` (< kTokens) tokens from t: one tile of exactly that many.
template <int kTokens, typename Tile, int C = kTokens - 1>
inline void tail_tokens(const Tile& tile, int64_t t, int64_t left) {
  if constexpr (C >= 1) {
    if (left == C) return tile.template run<C>(t);
    tail_tokens<kTokens, Tile, C - 1>(tile, t, left);
  }
}

// A tile's rows against every token: whole tiles of kTokens, then the rest.
template <int kTokens, typename Tile>
inline void against_tokens(const Tile& tile, int64_t tokens) {
  int64_t t = 0;
  for (; t + kTokens <= tokens; t += kTokens) tile.template run<kTokens>(t);
  tail_tokens<kTokens>(tile, t, tokens - t);
}

}  // namespace kiln::cpu
