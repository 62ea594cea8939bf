// One step's sampling work beyond the plain sampler (sampling_math.hpp): vLLM's logit processing
// before sampling — logit_bias, min_tokens, bad_words, and the repetition, frequency and presence
// penalties — as a short list of per-token edits per row; a token mask per row where only some
// tokens may come (structured output, allowed_token_ids); and the log-probabilities (chosen token
// and top-N) from the raw logits, as vLLM's default "raw_logprobs" mode reports them. The CPU
// (sample_batch_cpu) and CUDA (CudaSampler::sample) paths compute the same tokens bit for bit, and
// the same logprobs to float rounding.
//
// Per row: the edits are applied to the logits, then the mask (a token it does not allow becomes
// kBannedLogit), the row is sampled, and both are undone; logprobs then read the raw row:
// logprob_i = (x_i - max) - log Σ exp(x_j - max) (sampling_exp, summed in fp64), top-N ordered by
// logit (ties: lower id first).
#pragma once

#include <cfloat>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/serving/sampling_math.hpp"
#include "runtime/serving/token_constraint.hpp"

namespace kiln {

struct SamplingParams;

// The edit of one token's logit in one row. Every field applies (neutral values leave x exact:
// +0, /1, -0), in vLLM's order: logit_bias, then min_tokens' ban, then the penalties.
struct LogitEdit {
  int32_t token = 0;
  float bias = 0.0f;        // logit_bias
  float repetition = 1.0f;  // repetition_penalty when the token is in the prompt or the output
  float frequency = 0.0f;   // frequency_penalty × the token's count in the output (an fp32 product)
  float presence = 0.0f;    // presence_penalty when the token is in the output
  int32_t banned = 0;       // min_tokens not reached and the token would stop the request
};

// What a banned token's logit becomes: the lowest finite float, so the row stays "finite" for the
// sampler's NaN/inf check while the token's weight is 0 (exp underflows) and it never wins argmax.
constexpr float kBannedLogit = -FLT_MAX;

KILN_HOST_DEVICE inline float apply_logit_edit(float x, const LogitEdit& e) {
  if (e.banned) return kBannedLogit;
  x = add_rn(x, e.bias);
  x = x > 0.0f ? div_rn(x, e.repetition) : mul_rn(x, e.repetition);
  x = add_rn(x, -e.frequency);
  return add_rn(x, -e.presence);
}

KILN_HOST_DEVICE inline bool token_allowed(const TokenMaskWord* mask, int32_t token) {
  return (mask[token >> 6] >> (token & 63)) & 1u;
}

// A step's rows. edit_offsets is empty (no edits) or rows.size() + 1 offsets into edits.
// mask_rows is empty (no masks) or one entry a row: -1 (no mask), or k: the row's mask is words
// [k * token_mask_words(vocab), (k + 1) * token_mask_words(vocab)) of masks.
struct SampleBatch {
  std::vector<SamplerRow> rows;
  std::vector<LogitEdit> edits;
  std::vector<int32_t> edit_offsets;
  std::vector<TokenMaskWord> masks;
  std::vector<int32_t> mask_rows;

  static SampleBatch of(std::vector<SamplerRow> rows) { return SampleBatch{std::move(rows), {}, {}, {}, {}}; }
  std::span<const LogitEdit> row_edits(size_t r) const {
    if (edit_offsets.empty()) return {};
    return std::span(edits).subspan(edit_offsets[r], edit_offsets[r + 1] - edit_offsets[r]);
  }
  // Row r's mask, or an empty span when it has none.
  std::span<const TokenMaskWord> row_mask(size_t r, int32_t vocab_size) const {
    if (mask_rows.empty() || mask_rows[r] < 0) return {};
    const auto words = static_cast<size_t>(token_mask_words(vocab_size));
    return std::span(masks).subspan(static_cast<size_t>(mask_rows[r]) * words, words);
  }
  int32_t num_masks(int32_t vocab_size) const {
    return static_cast<int32_t>(masks.size() / static_cast<size_t>(token_mask_words(vocab_size)));
  }
  // Throws unless the edit offsets and masks fit `rows` rows of vocab_size tokens.
  void check(int32_t vocab_size, const char* who) const;
};

struct SampleResult {
  std::vector<SampleOutput> outputs;   // per row; logprob filled where rows[r].want_logprob
  std::vector<TokenLogprob> top;       // rows × kMaxTopLogprobs; row r's first rows[r].top_logprobs are set
  std::span<const TokenLogprob> row_top(size_t r, int32_t n) const {
    return std::span(top).subspan(r * kMaxTopLogprobs, static_cast<size_t>(n));
  }
};

// One prompt token's logprob given the tokens before it, with the top-N at its position.
struct PromptTokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

// The edits of one sequence's next sample. output_counts: (token, count) of the generated tokens;
// prompt_tokens: the distinct prompt tokens (for the repetition penalty); num_generated: tokens
// generated so far; stop_ids: EOS (unless ignore_eos) and stop_token_ids, banned below min_tokens;
// bad_tokens: banned too (bad_word_bans). Sorted by token; at most one edit per token.
std::vector<LogitEdit> make_logit_edits(const SamplingParams& params, std::span<const std::pair<int32_t, int32_t>> output_counts,
                                        std::span<const int32_t> prompt_tokens, int32_t num_generated,
                                        std::span<const int32_t> stop_ids, std::span<const int32_t> bad_tokens = {});

// vLLM's bad_words at this step: every one-token word, and each longer word's last token where the
// generated tokens (`output`) end with the rest of the word.
std::vector<int32_t> bad_word_bans(const std::vector<std::vector<int32_t>>& words, std::span<const int32_t> output);

// Structured output's mask of a sequence's next sample, written to `mask` (token_mask_words(
// vocab_size) words): the tokens the constraint allows, and the end tokens (EOS, stop_token_ids)
// cleared until the text may end, when they are let through whatever the constraint says of them.
void constraint_mask(TokenConstraintState& constraint, int32_t vocab_size, std::span<const int32_t> end_tokens,
                     std::span<TokenMaskWord> mask);

}  // namespace kiln
