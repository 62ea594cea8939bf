// The batched decode GEMV's block geometry (templates/gemv_batched_geometry.hpp) at the models'
// shapes: the choices bench/RESULTS.md measured (a change to the choosers that moves one of these
// is a change to measure again), and the rules the choosers promise over every shape.
#include <catch2/catch.hpp>

#include "templates/gemv_batched_geometry.hpp"
#include "templates/gemv_plan.hpp"

namespace {

using kiln::detail::BatchedGemvBlock;
using kiln::detail::BatchedGemvWideBlock;

constexpr int kSms = 132;  // H100 SXM and H200

BatchedGemvBlock narrow(int n, int k, int sms = kSms) {
  const kiln::GemvPlan p = kiln::gemv_plan(n, k, sms);
  return kiln::detail::batched_gemv_block(p.row_tiles, p.warps_k, sms);
}

BatchedGemvWideBlock wide(int n, int k, int sms = kSms) {
  const kiln::GemvPlan p = kiln::gemv_plan(n, k, sms);
  return kiln::detail::batched_gemv_wide_block(p.row_tiles, p.warps_k, sms);
}

}  // namespace

TEST_CASE("batched GEMV: the narrow form's geometry at the measured shapes", "[gemv_geometry]") {
  struct Case {
    const char* name;
    int n, k, tiles_per_warp, warps;
  };
  // The shapes templates/gemv_batched_geometry.hpp cites: Llama-3.1-8B's o_proj in 2-tile blocks, a
  // block an SM; its qkv_proj in 3-tile blocks, 128 of them; and the LM heads, whose blocks would
  // come in waves, in 8-warp blocks two an SM (bench/RESULTS.md 2026-12-07, sixty-fifth and
  // sixty-sixth sessions).
  const Case cases[] = {
      {"Llama-3.1-8B o_proj", 4096, 4096, 1, 16},     {"Llama-3.1-8B qkv_proj", 6144, 4096, 1, 24},
      {"Llama-3.1-8B gate_up", 28672, 4096, 2, 16},  {"Llama-3.2-1B qkv_proj", 3072, 2048, 1, 16},
      {"Qwen3-0.6B gate_up", 6144, 1024, 1, 24},     {"Qwen3-0.6B lm_head", 151936, 1024, 1, 8},
      {"Llama-3.2-1B lm_head", 128256, 2048, 2, 8},  {"Llama-3.1-8B lm_head", 128256, 4096, 2, 8},
      {"SmolLM2-135M lm_head", 49152, 576, 1, 24},  // one wave: 128 blocks of 3 tiles
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const BatchedGemvBlock b = narrow(c.n, c.k);
    CHECK(b.tiles_per_warp == c.tiles_per_warp);
    CHECK(b.warps == c.warps);
  }
}

TEST_CASE("batched GEMV: the wide form's geometry at the measured shapes", "[gemv_geometry]") {
  struct Case {
    const char* name;
    int n, k, tiles_per_warp, warps, block_warps_k;
  };
  // Two splits a block (bench/RESULTS.md 2026-12-07, sixty-fifth session): 4 warps on the 0.6B's
  // and SmolLM2's shapes, 8 on the 1B's.
  const Case cases[] = {
      {"Qwen3-0.6B o_proj", 1024, 2048, 1, 4, 2},    {"Qwen3-0.6B down_proj", 1024, 3072, 1, 4, 2},
      {"Llama-3.2-1B o_proj", 2048, 2048, 1, 8, 2},  {"Llama-3.2-1B down_proj", 2048, 8192, 1, 8, 2},
      {"SmolLM2-135M qkv_proj", 960, 576, 1, 4, 2},  {"SmolLM2-135M down_proj", 576, 1536, 1, 4, 2},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const kiln::GemvPlan p = kiln::gemv_plan(c.n, c.k, kSms);
    REQUIRE(p.blocks < kSms);  // the shapes the wide form is for
    const BatchedGemvWideBlock b = wide(c.n, c.k);
    CHECK(b.tiles_per_warp == c.tiles_per_warp);
    CHECK(b.warps == c.warps);
    CHECK(b.block_warps_k == c.block_warps_k);
  }
}

TEST_CASE("batched GEMV: every shape's geometry holds whole splits", "[gemv_geometry]") {
  // The kernels' static_asserts, over row tiles 1..4000, every split count and several SM counts:
  // a narrow block holds all the splits of its row groups; a wide block a group of them (at least
  // two groups), two or more where the splits pair up.
  int narrow_none = 0;
  for (const int sms : {78, 108, 114, 132, 170}) {
    for (int warps_k = 1; warps_k <= 16; ++warps_k) {
      for (int row_tiles = 1; row_tiles <= 4000; ++row_tiles) {
        INFO("row_tiles " << row_tiles << ", warps_k " << warps_k << ", sms " << sms);
        const BatchedGemvBlock b = kiln::detail::batched_gemv_block(row_tiles, warps_k, sms);
        if (b.warps == 0) {
          ++narrow_none;
          REQUIRE(8 % warps_k != 0);  // no candidate of 8, 16 or 24 warps holds whole splits
          REQUIRE(24 % warps_k != 0);
        } else {
          REQUIRE(b.warps % warps_k == 0);
          REQUIRE((b.tiles_per_warp == 1 || b.tiles_per_warp == 2));
        }
        const BatchedGemvWideBlock w = kiln::detail::batched_gemv_wide_block(row_tiles, warps_k, sms);
        if (warps_k < 2) {
          REQUIRE(w.warps == 0);  // nothing to split over blocks
          continue;
        }
        REQUIRE(w.warps > 0);  // one split a block takes any split count
        REQUIRE(w.warps % w.block_warps_k == 0);
        REQUIRE(warps_k % w.block_warps_k == 0);
        REQUIRE(warps_k / w.block_warps_k >= 2);
        if (warps_k % 2 == 0 && warps_k >= 4) REQUIRE(w.block_warps_k >= 2);
      }
    }
  }
  CHECK(narrow_none > 0);  // split counts of 5 and 7 have none (the wide form's shapes)
}
