#include <catch2/catch.hpp>

#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/serving/step_batch_builder.hpp"

using namespace kiln;
using V = std::vector<int32_t>;

namespace {

ScheduledSeq scheduled(RequestId id, int32_t start, V tokens, V table, bool samples, uint64_t seed = 0) {
  ScheduledSeq s;
  s.id = id;
  s.start = start;
  s.new_tokens = std::move(tokens);
  s.block_table = std::move(table);
  s.samples = samples;
  s.sampler.seed = seed;
  return s;
}

}  // namespace

TEST_CASE("build_step_batch lays out a decode and a prefill continuation and a new prefill") {
  // Page size 4. A: decode of position 5. B: middle chunk of an 11-token prompt (positions 4-6,
  // no sample; its table already holds the whole prompt's 3 pages). C: a 9-token prompt at once.
  ScheduledStep step;
  step.seqs.push_back(scheduled(7, 5, {42}, {3, 1}, true, 70));
  step.seqs.push_back(scheduled(9, 4, {10, 11, 12}, {0, 2, 6}, false, 90));
  step.seqs.push_back(scheduled(11, 0, {5, 6, 7, 8, 9, 10, 11, 12, 13}, {4, 5, 7}, true, 110));
  step.num_decodes = 1;

  const StepBatch b = build_step_batch(step, 4);
  CHECK(b.token_ids == V{42, 10, 11, 12, 5, 6, 7, 8, 9, 10, 11, 12, 13});
  CHECK(b.positions == V{5, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(b.slot_mapping == V{5, 8, 9, 10, 16, 17, 18, 19, 20, 21, 22, 23, 28});
  CHECK(b.query_start == V{0, 1, 4, 13});
  CHECK(b.context_len == V{6, 7, 9});
  CHECK(b.max_pages_per_seq == 3);
  // B's row stops at the 2 pages its 7-token context covers; the rest is padding.
  CHECK(b.block_tables == V{3, 1, kBlockTablePadding, 0, 2, kBlockTablePadding, 4, 5, 7});
  CHECK(b.logit_rows == V{0, 12});
  CHECK(b.num_tokens() == 13);
  CHECK(b.num_seqs() == 3);
  CHECK_FALSE(b.decode_only());

  const std::vector<SamplerRow> rows = sampler_rows(step);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].seed == 70);
  CHECK(rows[1].seed == 110);
}

TEST_CASE("a batch of decodes is decode_only") {
  ScheduledStep step;
  step.seqs.push_back(scheduled(1, 0, {3}, {2}, true));
  step.seqs.push_back(scheduled(2, 8, {4}, {0, 1, 5}, true));
  const StepBatch b = build_step_batch(step, 4);
  CHECK(b.decode_only());
  CHECK(b.slot_mapping == V{8, 20});
  CHECK(b.block_tables == V{2, 0, 0, 0, 1, 5});
  CHECK(b.logit_rows == V{0, 1});
}

TEST_CASE("build_step_batch refuses a block table that does not cover the context") {
  ScheduledStep step;
  step.seqs.push_back(scheduled(5, 4, {1, 2}, {0}, true));
  CHECK_THROWS_WITH(build_step_batch(step, 4), Catch::Contains("sequence 5 has 2 new tokens at position 4 and 1 pages"));
  step.seqs[0].block_table = {0, 1};
  step.seqs[0].new_tokens.clear();
  CHECK_THROWS_AS(build_step_batch(step, 4), Error);
}
