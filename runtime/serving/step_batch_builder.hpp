// Turns one phase of a scheduled step into the flat batch the forward consumes
// (runtime/core/step_batch.hpp), written straight into the backend's staging memory, and the
// sampler rows for its logits.
#pragma once

#include <span>
#include <vector>

#include "runtime/core/step_batch.hpp"
#include "runtime/serving/scheduled_step.hpp"

namespace kiln {

// Rows in phase order; each block_tables row (the buffer's fixed stride) starts with the pages
// that cover its sequence's context_len. logit_rows: the last row of every sequence that samples,
// in phase order, then every row of the chunks that keep their prompt logits, then the rows that
// predict the prompt tokens whose logprobs were asked for (prompt_logit_rows, prompt_target_rows).
StepBatch build_step_batch(const PhaseStep& phase, int32_t page_size, StepBuffer& buffer);

// Where each prompt-logits chunk's rows landed in a batch's logit rows: sequence `id` has its
// positions [start, start + count) at logits rows [first_row, first_row + count).
struct PromptLogitRows {
  RequestId id;
  int32_t start, count, first_row;
};
std::vector<PromptLogitRows> prompt_logit_rows(const PhaseStep& phase);
// The same for the rows of prompt logprobs (ScheduledSeq::prompt_targets: `count` of them).
std::vector<PromptLogitRows> prompt_target_rows(const PhaseStep& phase);

}  // namespace kiln
