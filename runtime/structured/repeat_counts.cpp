#include "runtime/structured/repeat_counts.hpp"

#include <algorithm>
#include <functional>
#include <queue>

namespace kiln {

namespace {

using Kind = Grammar::Kind;

constexpr int64_t kNever = int64_t{1} << 40;  // a rule that matches nothing (or more bytes than any token)

int64_t add(int64_t a, int64_t b) { return std::min(kNever, a + b); }

// The fewest bytes each rule matches (Knuth's shortest derivations: a rule is final once its
// cheapest alternative with every reference final is the cheapest left).
std::vector<int64_t> rule_min_bytes(const Grammar& g) {
  struct Alt {
    int32_t rule;
    int64_t bytes = 0;
    int32_t pending = 0;  // references not final yet
  };
  std::vector<Alt> alts;
  std::vector<std::vector<int32_t>> uses(g.alts.size());  // per rule: the alternatives referring to it
  using Entry = std::pair<int64_t, int32_t>;              // (bytes, rule)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> ready;
  for (size_t r = 0; r < g.alts.size(); ++r) {
    for (int32_t first : g.alts[r]) {
      const auto a = static_cast<int32_t>(alts.size());
      alts.push_back(Alt{static_cast<int32_t>(r)});
      for (int32_t p = first; g.elems[p].kind != Kind::End; ++p) {
        if (g.elems[p].kind == Kind::Bytes) {
          alts[a].bytes = add(alts[a].bytes, 1);
        } else {
          ++alts[a].pending;
          uses[g.elems[p].arg].push_back(a);
        }
      }
      if (alts[a].pending == 0) ready.emplace(alts[a].bytes, alts[a].rule);
    }
  }
  std::vector<int64_t> min(g.alts.size(), kNever);
  std::vector<bool> final(g.alts.size(), false);
  while (!ready.empty()) {
    const auto [bytes, r] = ready.top();
    ready.pop();
    if (final[r]) continue;
    final[r] = true;
    min[r] = bytes;
    for (int32_t a : uses[r]) {
      alts[a].bytes = add(alts[a].bytes, bytes);
      if (--alts[a].pending == 0) ready.emplace(alts[a].bytes, alts[a].rule);
    }
  }
  return min;
}

}  // namespace

RepeatCounts::RepeatCounts(const Grammar& g) {
  const std::vector<int64_t> rule_min = rule_min_bytes(g);
  min_rest_.assign(g.elems.size(), 0);
  for (const auto& alts : g.alts) {
    for (int32_t first : alts) {
      int32_t end = first;
      while (g.elems[end].kind != Kind::End) ++end;
      int64_t rest = 0;
      for (int32_t p = end - 1; p >= first; --p) {
        rest = add(rest, g.elems[p].kind == Kind::Bytes ? 1 : rule_min[g.elems[p].arg]);
        min_rest_[p] = rest;
      }
    }
  }
  chain_rule_.assign(g.elems.size(), -1);
  for (size_t r = 0; r < g.repetitions.size(); ++r) {
    const std::vector<int32_t>& chain = g.repetitions[r].rules;
    first_elems_.emplace_back();
    // rules[0] ::= x | (empty): its first alternative is one copy of x.
    min_copy_.push_back(std::max<int64_t>(1, min_rest_[g.alts[chain[0]][0]]));
    for (size_t k = 0; k < chain.size(); ++k) {
      const int32_t first = g.alts[chain[k]][0];
      first_elems_.back().push_back(first);
      const auto index = static_cast<int32_t>(rules_.size());
      rules_.push_back(ChainRule{static_cast<int32_t>(r), static_cast<int32_t>(k + 1)});
      // Not the End: a stack never holds one (the matcher pops through it), and the rules' Ends
      // are at different offsets (rules[0] has no reference to a next one).
      for (int32_t p = first; g.elems[p].kind != Kind::End; ++p) chain_rule_[p] = index;
    }
  }
}

RepeatCounts::Canonical RepeatCounts::canonical(const GrammarState& s, int64_t cap) const {
  Canonical out;
  out.agree_bytes = cap;
  for (std::vector<int32_t> stack : s.stacks) {
    int64_t above = 0;  // the fewest bytes before this entry's repetition could take another copy
    for (size_t i = stack.size(); i-- > 0;) {
      above = add(above, min_rest_[stack[i]]);
      const int32_t index = chain_rule_[stack[i]];
      if (index < 0) continue;
      const ChainRule c = rules_[index];
      const std::vector<int32_t>& firsts = first_elems_[c.repetition];
      const int64_t per_copy = min_copy_[c.repetition];
      // Enough copies that a token of `cap` bytes cannot run out of them (at least 2: the rules
      // that hold every offset of the first alternative).
      const auto target = static_cast<int32_t>(
          std::min<int64_t>(static_cast<int64_t>(firsts.size()), 1 + (cap + per_copy - 1) / per_copy));
      // A token reaches a copy past the count only after `above` bytes and the copies allowed.
      const int64_t fewer = std::min(c.copies, target) - 1;  // at most 4096 copies of at most kNever bytes
      out.agree_bytes = std::min(out.agree_bytes, add(above, fewer * per_copy));
      if (c.copies != target) {
        stack[i] = firsts[target - 1] + (stack[i] - firsts[c.copies - 1]);
        out.changed = true;
      }
    }
    out.state.stacks.push_back(std::move(stack));
  }
  std::sort(out.state.stacks.begin(), out.state.stacks.end());
  out.state.stacks.erase(std::unique(out.state.stacks.begin(), out.state.stacks.end()), out.state.stacks.end());
  return out;
}

}  // namespace kiln
