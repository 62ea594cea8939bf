// The whole-step decode kernel's stage profile (--profile): a step's timeline folded into stage
// families, each timed from the previous stage's last block to its own last block.
#include <catch2/catch.hpp>

#include <vector>

#include "runtime/core/op_profile.hpp"
#include "runtime/engine/step_profile.hpp"

using namespace kiln;

TEST_CASE("the stage profile sums each stage family over the layers") {
  ModelInfo m{};
  m.num_layers = 2;
  m.hidden_size = 4;
  m.num_attention_heads = 2;
  m.num_key_value_heads = 1;
  m.head_dim = 2;
  m.intermediate_size = 8;
  m.vocab_size = 16;
  m.kv_elems_per_token = 4;
  StepProfile profile(m);
  REQUIRE(profile.num_stages() == 14);  // embed, 6 per layer, lm_head

  // Two blocks; stage s starts at 100·s + 10·b ns and ends at 100·s + 50 + b.
  const int blocks = 2;
  std::vector<uint64_t> timeline(2 * profile.num_stages() * blocks);
  for (int s = 0; s < profile.num_stages(); ++s) {
    for (int b = 0; b < blocks; ++b) {
      timeline[2 * (s * blocks + b)] = 100 * s + 10 * b;
      timeline[2 * (s * blocks + b) + 1] = 100 * s + 50 + b;
    }
  }
  const std::vector<int32_t> context_len = {3, 5};
  profile.add(timeline, blocks, context_len);
  REQUIRE(profile.steps() == 1);

  const std::vector<StageTiming>& f = profile.stages();
  REQUIRE(f.size() == 8);
  CHECK(f[0].name == "embed");
  CHECK(f[0].seconds == Approx(51e-9));
  CHECK(f[1].name == "qkv_proj");
  CHECK(f[1].seconds == Approx(200e-9));      // two layers, 100 ns from the stage before to its last block
  CHECK(f[1].wait_seconds == Approx(98e-9));  // 49 ns each: from the stage before's end to the first start
  CHECK(f[1].bytes == Approx(2 * (2 * 2 + 2 * 1 * 2) * 4 * 2));  // (q | k | v) × hidden × bf16, per layer
  CHECK(f[2].name == "attention");
  CHECK(f[2].bytes == Approx(2 * (3 + 5) * 4 * 2));  // every sequence's KV cache, per layer
  CHECK(f[5].name == "gate_up_proj");
  CHECK(f[5].bytes == Approx(2 * 2 * 8 * 4 * 2));
  CHECK(f[7].name == "lm_head");
  CHECK(f[7].seconds == Approx(100e-9));
  CHECK(f[7].bytes == Approx(16 * 4 * 2));

  // A timeline too short for the model's stages is refused.
  CHECK_THROWS(profile.add(std::vector<uint64_t>(4), blocks, context_len));
}

// The per-op path's profile (runtime/core/op_profile.cpp): a step's marks, in launch order, folded
// into op families with the bytes each read.
TEST_CASE("the op profile sums each op family and counts what the step read") {
  const std::vector<OpMark> marks = {
      {"embed", OpReads::token_rows, 8},       {"qkv_proj", OpReads::weights, 100}, {"attention", OpReads::kv_cache, 0},
      {"experts", OpReads::experts, 30},      {"qkv_proj", OpReads::weights, 100}, {"attention", OpReads::kv_cache, 0},
      {"experts", OpReads::experts, 30},      {"lm_head", OpReads::weights, 500}};
  const std::vector<double> seconds = {1e-6, 2e-6, 3e-6, 4e-6, 2e-6, 5e-6, 6e-6, 7e-6};
  StepReads reads;
  reads.tokens = 3;
  reads.kv_tokens = 40;           // Σ context lengths
  reads.kv_bytes_per_token = 16;  // one layer's
  reads.experts_read = 5;         // distinct (layer, expert) pairs over both MoE layers
  OpProfile profile;
  profile.add(marks, seconds, reads);
  profile.add(marks, seconds, reads);
  REQUIRE(profile.steps() == 2);

  const std::vector<OpTiming>& ops = profile.ops();
  REQUIRE(ops.size() == 5);  // families, in the order a step first runs them
  CHECK(ops[0].op == "embed");
  CHECK(ops[0].bytes == Approx(2 * 3 * 8));  // a row per token
  CHECK(ops[1].op == "qkv_proj");
  CHECK(ops[1].seconds == Approx(2 * 4e-6));
  CHECK(ops[1].bytes == Approx(2 * 200));
  CHECK(ops[2].op == "attention");
  CHECK(ops[2].seconds == Approx(2 * 8e-6));
  CHECK(ops[2].bytes == Approx(2 * 2 * 40 * 16));  // every sequence's KV, per layer
  CHECK(ops[3].op == "experts");
  CHECK(ops[3].bytes == Approx(2 * 5 * 30));  // the chosen experts, whichever layer chose them
  CHECK(ops[4].op == "lm_head");
  CHECK(ops[4].seconds == Approx(2 * 7e-6));

  // Experts not counted (-1) read nothing known; a step's times must match its marks.
  reads.experts_read = -1;
  OpProfile uncounted;
  uncounted.add(marks, seconds, reads);
  CHECK(uncounted.ops()[3].bytes == 0);
  CHECK_THROWS(uncounted.add(marks, std::vector<double>(3), reads));
}
