#include <catch2/catch.hpp>

#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/serving/step_batch_builder.hpp"

using namespace kiln;
using V = std::vector<int32_t>;

namespace {

ScheduledSeq scheduled(RequestId id, int32_t start, V tokens, const V& table, bool samples, uint64_t seed = 0) {
  ScheduledSeq s;
  s.id = id;
  s.start = start;
  s.new_tokens = std::move(tokens);
  s.block_table = table;  // a view: the tables below outlive the builds
  s.samples = samples;
  s.sampler.seed = seed;
  return s;
}

V vec(std::span<const int32_t> s) { return V(s.begin(), s.end()); }

// Block tables of stride 3 (the model's pages for its max context, here 12 tokens of pages of 4).
StepBuffer buffer() { return StepBuffer(StepCapacity{16, 4, 20, 3}); }

}  // namespace

TEST_CASE("build_step_batch lays out a prefill continuation and a new prefill") {
  // Page size 4. B: middle chunk of an 11-token prompt (positions 4-6, no sample; its table
  // already holds the whole prompt's 3 pages). C: a 9-token prompt at once.
  const V table_b{0, 2, 6}, table_c{4, 5, 7};
  PhaseStep phase{StepPhase::prefill};
  phase.seqs.push_back(scheduled(9, 4, {10, 11, 12}, table_b, false, 90));
  phase.seqs.push_back(scheduled(11, 0, {5, 6, 7, 8, 9, 10, 11, 12, 13}, table_c, true, 110));
  phase.num_tokens = 12;

  StepBuffer buf = buffer();
  const StepBatch b = build_step_batch(phase, 4, buf);
  CHECK(b.phase == StepPhase::prefill);
  CHECK(vec(b.token_ids) == V{10, 11, 12, 5, 6, 7, 8, 9, 10, 11, 12, 13});
  CHECK(vec(b.positions) == V{4, 5, 6, 0, 1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(vec(b.slot_mapping) == V{8, 9, 10, 16, 17, 18, 19, 20, 21, 22, 23, 28});
  CHECK(vec(b.query_start) == V{0, 3, 12});
  CHECK(vec(b.context_len) == V{7, 9});
  CHECK(b.max_pages_per_seq == 3);  // the buffer's fixed stride, whatever the step
  // B's row holds the 2 pages its 7-token context covers (the third entry is never read).
  CHECK(vec(b.block_tables).at(0) == 0);
  CHECK(vec(b.block_tables).at(1) == 2);
  CHECK(vec(b.block_tables.subspan(3)) == V{4, 5, 7});
  CHECK(vec(b.logit_rows) == V{11});
  CHECK(b.num_samples == 1);
  CHECK(b.num_tokens() == 12);
  CHECK(b.num_seqs() == 2);
  CHECK(b.max_query_len() == 9);
  // One upload covers the arrays: the block tables come last.
  CHECK(buf.used_ints(b) == buf.offset_of(b.block_tables) + 2 * 3);

  const std::vector<SamplerRow> rows = sample_batch(phase.seqs, 1000).rows;
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].seed == 110);
}

TEST_CASE("a decode phase has one token per sequence and a sample each") {
  const V table_a{2}, table_b{0, 1, 5};
  PhaseStep phase{StepPhase::decode};
  phase.seqs.push_back(scheduled(1, 0, {3}, table_a, true));
  phase.seqs.push_back(scheduled(2, 8, {4}, table_b, true));
  phase.num_tokens = 2;
  StepBuffer buf = buffer();
  const StepBatch b = build_step_batch(phase, 4, buf);
  CHECK(b.phase == StepPhase::decode);
  CHECK(vec(b.slot_mapping) == V{8, 20});
  CHECK(vec(b.block_tables).at(0) == 2);
  CHECK(vec(b.block_tables.subspan(3)) == V{0, 1, 5});
  CHECK(vec(b.logit_rows) == V{0, 1});

  phase.seqs[1].new_tokens = {4, 5};
  CHECK_THROWS_WITH(build_step_batch(phase, 4, buf), Catch::Contains("decode sequence 2 brings 2 tokens"));
}

TEST_CASE("prompt-logits chunks keep every row's logits after the sampling rows") {
  const V table_a{1, 2}, table_b{3};
  PhaseStep phase{StepPhase::prefill};
  phase.seqs.push_back(scheduled(4, 0, {7, 8, 9}, table_a, false));
  phase.seqs.push_back(scheduled(5, 0, {1, 2}, table_b, true));
  phase.seqs[0].prompt_logits = true;
  phase.num_tokens = 5;
  StepBuffer buf = buffer();
  const StepBatch b = build_step_batch(phase, 4, buf);
  CHECK(b.num_samples == 1);
  CHECK(vec(b.logit_rows) == V{4, 0, 1, 2});  // B's sample first, then A's three prompt rows
  const std::vector<PromptLogitRows> kept = prompt_logit_rows(phase);
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].id == 4);
  CHECK(kept[0].start == 0);
  CHECK(kept[0].count == 3);
  CHECK(kept[0].first_row == 1);
}

TEST_CASE("build_step_batch refuses a block table that does not cover the context") {
  const V one{0}, two{0, 1}, four{0, 1, 2, 3};
  PhaseStep phase{StepPhase::prefill};
  phase.seqs.push_back(scheduled(5, 4, {1, 2}, one, true));
  phase.num_tokens = 2;
  StepBuffer buf = buffer();
  CHECK_THROWS_WITH(build_step_batch(phase, 4, buf),
                    Catch::Contains("sequence 5 has 2 new tokens at position 4 and 1 pages"));
  phase.seqs[0].block_table = two;
  phase.seqs[0].new_tokens.clear();
  CHECK_THROWS_AS(build_step_batch(phase, 4, buf), Error);
  // A context beyond the buffer's stride (the model's max context).
  phase.seqs[0] = scheduled(5, 12, {1}, four, true);
  phase.num_tokens = 1;
  CHECK_THROWS_WITH(build_step_batch(phase, 4, buf), Catch::Contains("at most 3"));
}
