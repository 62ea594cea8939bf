// Masks shared across the counts of bounded repetitions.
//
// A bounded repetition x{m,n} (a JSON schema's maxLength, maxItems) is a chain of rules, one per
// count of copies still allowed (Grammar::Repetition), so a string of "maxLength": 60 passes
// through 60 grammar states that differ only in that count, and each would cost a walk of the whole
// vocabulary (milliseconds over 100K tokens). But a token of l bytes can only tell two counts
// apart when its bytes reach a copy of x past the smaller one: the stack above the repetition has
// to be finished first (at least its fewest bytes), then the copies still allowed (at least the
// fewest bytes of x each). So two states that differ only in such counts allow the same tokens of
// up to that many bytes; canonical() maps a state to the one with every count at a canonical value
// (one mask walked for all of them) and says up to which length the two agree. The longer tokens
// are few (4% of DeepSeek's 102,400 are longer than 12 bytes) and are walked from the state itself.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/structured/grammar.hpp"
#include "runtime/structured/grammar_matcher.hpp"

namespace kiln {

class RepeatCounts {
 public:
  explicit RepeatCounts(const Grammar& g);

  struct Canonical {
    GrammarState state;      // every bounded repetition's count at its canonical value
    int64_t agree_bytes = 0;  // tokens of at most this many bytes are allowed alike in both states
    bool changed = false;     // state differs from the one given
  };
  // cap: the most bytes agree_bytes needs (the canonical counts are chosen to reach it).
  Canonical canonical(const GrammarState& s, int64_t cap) const;

 private:
  struct ChainRule {
    int32_t repetition;  // index into Grammar::repetitions
    int32_t copies;      // copies of x it allows: its own and those after it
  };
  std::vector<int64_t> min_rest_;    // per element: the fewest bytes from it to the end of its alternative
  std::vector<int32_t> chain_rule_;  // per element of a chain rule's first alternative: index into rules_; else -1
  std::vector<ChainRule> rules_;
  std::vector<std::vector<int32_t>> first_elems_;  // per repetition, per copies - 1: the rule's first element
  std::vector<int64_t> min_copy_;    // per repetition: the fewest bytes of one copy of x (at least 1)
};

}  // namespace kiln
