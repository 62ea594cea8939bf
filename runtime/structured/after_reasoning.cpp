#include "runtime/structured/after_reasoning.hpp"

#include <algorithm>

namespace kiln {
namespace {

enum class Phase { may_open, thinking, answer };

class AfterReasoningState : public TokenConstraintState {
 public:
  AfterReasoningState(std::unique_ptr<TokenConstraintState> answer, ThinkTokens think, Phase phase)
      : answer_(std::move(answer)), think_(think), phase_(phase) {}

  void allowed(int32_t vocab_size, std::span<TokenMaskWord> mask, bool& can_end) override {
    if (phase_ == Phase::thinking) {
      std::fill(mask.begin(), mask.end(), ~TokenMaskWord{0});
      if (!mask.empty()) mask.back() = last_mask_word_bits(vocab_size);
      can_end = true;
      return;
    }
    answer_->allowed(vocab_size, mask, can_end);
    if (phase_ == Phase::may_open && think_.open < vocab_size) {
      mask[think_.open / 64] |= TokenMaskWord{1} << (think_.open % 64);
    }
  }

  void accept(int32_t token) override {
    switch (phase_) {
      case Phase::may_open:
        if (token == think_.open) {
          phase_ = Phase::thinking;
          return;
        }
        phase_ = Phase::answer;
        answer_->accept(token);
        return;
      case Phase::thinking:
        if (token == think_.close) phase_ = Phase::answer;
        return;
      case Phase::answer:
        answer_->accept(token);
        return;
    }
  }

 private:
  std::unique_ptr<TokenConstraintState> answer_;
  ThinkTokens think_;
  Phase phase_;
};

class AfterReasoning : public TokenConstraint {
 public:
  AfterReasoning(std::shared_ptr<const TokenConstraint> answer, ThinkTokens think, Phase phase)
      : answer_(std::move(answer)), think_(think), phase_(phase) {}
  std::unique_ptr<TokenConstraintState> start() const override {
    return std::make_unique<AfterReasoningState>(answer_->start(), think_, phase_);
  }

 private:
  std::shared_ptr<const TokenConstraint> answer_;
  ThinkTokens think_;
  Phase phase_;
};

}  // namespace

ReasoningStart reasoning_start(std::span<const int32_t> prompt, const ThinkTokens& think,
                               std::span<const int32_t> turn_ends, ReasoningStart fallback) {
  for (auto it = prompt.rbegin(); it != prompt.rend(); ++it) {
    if (*it == think.close) return ReasoningStart::ended;
    if (*it == think.open) return ReasoningStart::open;
    if (std::find(turn_ends.begin(), turn_ends.end(), *it) != turn_ends.end()) break;
  }
  return fallback;
}

std::shared_ptr<const TokenConstraint> after_reasoning(std::shared_ptr<const TokenConstraint> answer,
                                                       const ThinkTokens& think, ReasoningStart start) {
  if (start == ReasoningStart::ended || !think.found()) return answer;
  return std::make_shared<const AfterReasoning>(std::move(answer), think,
                                                start == ReasoningStart::open ? Phase::thinking : Phase::may_open);
}

}  // namespace kiln
