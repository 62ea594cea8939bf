#include "runtime/serving/sample_batch.hpp"

#include <algorithm>
#include <iterator>
#include <map>

#include "runtime/serving/sampling_params.hpp"
#include "runtime/serving/scheduled_step.hpp"
#include "runtime/serving/token_constraint.hpp"

namespace kiln {

std::vector<LogitEdit> make_logit_edits(const SamplingParams& p, std::span<const std::pair<int32_t, int32_t>> output_counts,
                                        std::span<const int32_t> prompt_tokens, int32_t num_generated,
                                        std::span<const int32_t> stop_ids) {
  std::map<int32_t, LogitEdit> edits;
  const auto edit = [&](int32_t token) -> LogitEdit& {
    LogitEdit& e = edits[token];
    e.token = token;
    return e;
  };
  for (const auto& [token, bias] : p.logit_bias) edit(token).bias += bias;
  if (num_generated < p.min_tokens) {
    for (int32_t token : stop_ids) edit(token).banned = 1;
  }
  if (p.repetition_penalty != 1.0f) {
    for (int32_t token : prompt_tokens) edit(token).repetition = p.repetition_penalty;
  }
  for (const auto& [token, count] : output_counts) {
    if (p.repetition_penalty != 1.0f) edit(token).repetition = p.repetition_penalty;
    if (p.frequency_penalty != 0.0f) edit(token).frequency = p.frequency_penalty * static_cast<float>(count);
    if (p.presence_penalty != 0.0f) edit(token).presence = p.presence_penalty;
  }
  std::vector<LogitEdit> out;
  out.reserve(edits.size());
  for (const auto& [token, e] : edits) out.push_back(e);
  return out;
}

void add_constraint_bans(TokenConstraintState& constraint, int32_t vocab_size, std::span<const int32_t> end_tokens,
                         std::span<const LogitEdit> edits, std::vector<LogitEdit>& out) {
  std::vector<int32_t> banned;
  bool can_end = false;
  constraint.banned(vocab_size, banned, can_end);
  // Each end token once (a chat's stop tokens repeat EOS): one edit a token, or the samplers'
  // save-and-restore of a banned logit would keep the ban.
  std::vector<int32_t> ends(end_tokens.begin(), end_tokens.end());
  std::sort(ends.begin(), ends.end());
  ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
  std::vector<int32_t> merged;
  merged.reserve(banned.size() + ends.size());
  if (can_end) {
    std::set_difference(banned.begin(), banned.end(), ends.begin(), ends.end(), std::back_inserter(merged));
  } else {
    std::set_union(banned.begin(), banned.end(), ends.begin(), ends.end(), std::back_inserter(merged));
  }
  out.reserve(out.size() + merged.size() + edits.size());
  size_t e = 0;
  for (int32_t token : merged) {
    while (e < edits.size() && edits[e].token < token) out.push_back(edits[e++]);
    LogitEdit ban;
    if (e < edits.size() && edits[e].token == token) ban = edits[e++];
    ban.token = token;
    ban.banned = 1;
    out.push_back(ban);
  }
  out.insert(out.end(), edits.begin() + static_cast<std::ptrdiff_t>(e), edits.end());
}

SampleBatch sample_batch(std::span<const ScheduledSeq> seqs, int32_t vocab_size) {
  SampleBatch batch;
  bool any_edits = false;
  for (const ScheduledSeq& s : seqs) any_edits = any_edits || (s.samples && (!s.edits.empty() || s.constraint));
  if (any_edits) batch.edit_offsets.push_back(0);
  for (const ScheduledSeq& s : seqs) {
    if (!s.samples) continue;
    batch.rows.push_back(s.sampler);
    if (!any_edits) continue;
    if (s.constraint) {
      add_constraint_bans(*s.constraint, vocab_size, s.end_tokens, s.edits, batch.edits);
    } else {
      batch.edits.insert(batch.edits.end(), s.edits.begin(), s.edits.end());
    }
    batch.edit_offsets.push_back(static_cast<int32_t>(batch.edits.size()));
  }
  return batch;
}

}  // namespace kiln
