#include "runtime/serving/sample_batch.hpp"

#include <algorithm>
#include <map>

#include "runtime/core/error.hpp"
#include "runtime/core/parallel.hpp"
#include "runtime/serving/sampling_params.hpp"
#include "runtime/serving/scheduled_step.hpp"
#include "runtime/serving/token_constraint.hpp"

namespace kiln {

std::vector<LogitEdit> make_logit_edits(const SamplingParams& p, std::span<const std::pair<int32_t, int32_t>> output_counts,
                                        std::span<const int32_t> prompt_tokens, int32_t num_generated,
                                        std::span<const int32_t> stop_ids, std::span<const int32_t> bad_tokens) {
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
  for (int32_t token : bad_tokens) edit(token).banned = 1;
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

std::vector<int32_t> bad_word_bans(const std::vector<std::vector<int32_t>>& words, std::span<const int32_t> output) {
  std::vector<int32_t> out;
  for (const std::vector<int32_t>& w : words) {
    const size_t rest = w.size() - 1;
    if (rest > output.size()) continue;
    if (std::equal(w.begin(), w.end() - 1, output.end() - static_cast<std::ptrdiff_t>(rest))) out.push_back(w.back());
  }
  return out;
}

void SampleBatch::check(int32_t vocab_size, const char* who) const {
  if (!edit_offsets.empty() && edit_offsets.size() != rows.size() + 1) {
    fail(who, ": ", edit_offsets.size(), " edit offsets for ", rows.size(), " rows");
  }
  if (mask_rows.empty()) {
    if (!masks.empty()) fail(who, ": ", masks.size(), " mask words and no mask rows");
    return;
  }
  if (mask_rows.size() != rows.size()) fail(who, ": ", mask_rows.size(), " mask rows for ", rows.size(), " rows");
  if (masks.size() % static_cast<size_t>(token_mask_words(vocab_size)) != 0) {
    fail(who, ": ", masks.size(), " mask words are not whole masks of ", token_mask_words(vocab_size), " words");
  }
  for (int32_t k : mask_rows) {
    if (k >= num_masks(vocab_size)) fail(who, ": mask ", k, " of ", num_masks(vocab_size));
  }
}

void constraint_mask(TokenConstraintState& constraint, int32_t vocab_size, std::span<const int32_t> end_tokens,
                     std::span<TokenMaskWord> mask) {
  bool can_end = false;
  constraint.allowed(vocab_size, mask, can_end);
  for (int32_t token : end_tokens) {
    if (token < 0 || token >= vocab_size) continue;
    const TokenMaskWord bit = TokenMaskWord{1} << (token & 63);
    if (can_end) {
      mask[token >> 6] |= bit;
    } else {
      mask[token >> 6] &= ~bit;
    }
  }
}

SampleBatch sample_batch(std::span<const ScheduledSeq> seqs, int32_t vocab_size) {
  SampleBatch batch;
  bool any_edits = false, any_masks = false;
  for (const ScheduledSeq& s : seqs) {
    any_edits = any_edits || (s.samples && !s.edits.empty());
    any_masks = any_masks || (s.samples && (s.constraint || s.allowed));
  }
  if (any_edits) batch.edit_offsets.push_back(0);
  const auto words = static_cast<size_t>(token_mask_words(vocab_size));
  std::vector<std::pair<const ScheduledSeq*, size_t>> constrained;  // and where its mask goes
  for (const ScheduledSeq& s : seqs) {
    if (!s.samples) continue;
    batch.rows.push_back(s.sampler);
    if (any_edits) {
      batch.edits.insert(batch.edits.end(), s.edits.begin(), s.edits.end());
      batch.edit_offsets.push_back(static_cast<int32_t>(batch.edits.size()));
    }
    if (!any_masks) continue;
    if (!s.constraint && !s.allowed) {
      batch.mask_rows.push_back(-1);
      continue;
    }
    batch.mask_rows.push_back(static_cast<int32_t>(batch.masks.size() / words));
    if (s.constraint) {
      constrained.emplace_back(&s, batch.masks.size());
      batch.masks.resize(batch.masks.size() + words);
    } else {
      batch.masks.insert(batch.masks.end(), s.allowed->begin(), s.allowed->end());
    }
  }
  // The constrained rows' masks at once: a state the cache has not seen walks the vocabulary's trie
  // (milliseconds over 100K tokens), and each sequence's state is its own (the shared grammars and
  // their caches are thread-safe). The pool is idle here: the GPU runs the forward, the CPU
  // backend's is done.
  parallel_for(static_cast<int64_t>(constrained.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const auto& [s, at] = constrained[static_cast<size_t>(i)];
      constraint_mask(*s->constraint, vocab_size, s->end_tokens, std::span(batch.masks).subspan(at, words));
    }
  });
  return batch;
}

}  // namespace kiln
