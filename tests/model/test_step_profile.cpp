// The whole-step decode kernel's stage profile (--profile): a step's timeline folded into stage
// families, each timed from the previous stage's last block to its own last block.
#include <catch2/catch.hpp>

#include <vector>

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
