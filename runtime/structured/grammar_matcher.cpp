#include "runtime/structured/grammar_matcher.hpp"

#include <algorithm>

namespace kiln {

using Kind = Grammar::Kind;

std::string GrammarState::key() const {
  std::string k;
  for (const auto& s : stacks) {
    k.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(int32_t));
    k.append(4, '\xff');  // -1: no position has it
  }
  return k;
}

void GrammarMatcher::reset() {
  nodes_.clear();
  index_.clear();
  expanded_.clear();
  trans_.clear();
  results_.clear();
  marks_.clear();
}

int32_t GrammarMatcher::node(int32_t pos, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  const auto [it, added] = index_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (added) {
    nodes_.push_back(Node{pos, parent, parent < 0 ? 1 : nodes_[parent].depth + 1});
    expanded_.push_back(0);
  }
  return it->second;
}

void GrammarMatcher::begin_step() {
  if (++epoch_ == 0) {  // wrapped: no mark may look current
    std::fill(expanded_.begin(), expanded_.end(), 0);
    epoch_ = 1;
  }
  accepted_ = false;
}

// Continue at `pos` with `parent` below: every node whose top is a byte to match, or kAccept.
void GrammarMatcher::expand(int32_t pos, int32_t parent, NodeSet& out) {
  while (g_.elems[pos].kind == Kind::End) {  // the rule ends: go on below
    if (parent < 0) {
      if (!accepted_) out.push_back(kAccept);
      accepted_ = true;
      return;
    }
    pos = nodes_[parent].pos;
    parent = nodes_[parent].parent;
  }
  const int32_t n = node(pos, parent);
  if (expanded_[n] == epoch_) return;  // done this step: its results are in out already
  expanded_[n] = epoch_;
  if (nodes_[n].depth > kMaxDepth || out.size() >= kMaxStacks || calls_ >= kMaxCalls) {
    limited_ = true;
    return;
  }
  const Grammar::Elem& e = g_.elems[pos];
  if (e.kind == Kind::Bytes) {
    out.push_back(n);
    return;
  }
  // A rule: its alternatives, each with what follows it below (nothing pushed when the rule is
  // the last element of its alternative: the stack does not grow on right recursion).
  const int32_t below = g_.elems[pos + 1].kind == Kind::End ? parent : node(pos + 1, parent);
  ++calls_;
  for (int32_t alt : g_.alts[e.arg]) expand(alt, below, out);
  --calls_;
}

GrammarMatcher::NodeSet GrammarMatcher::import(const GrammarState& state) {
  NodeSet set;
  for (const auto& stack : state.stacks) {
    if (stack.empty()) {
      set.push_back(kAccept);
      continue;
    }
    int32_t parent = -1;
    for (int32_t pos : stack) parent = node(pos, parent);
    set.push_back(parent);
  }
  return set;
}

GrammarState GrammarMatcher::export_state(const NodeSet& set) const {
  GrammarState s;
  for (int32_t n : set) {
    std::vector<int32_t> stack;
    for (int32_t at = n; at >= 0; at = nodes_[at].parent) stack.push_back(nodes_[at].pos);
    std::reverse(stack.begin(), stack.end());
    s.stacks.push_back(std::move(stack));
  }
  std::sort(s.stacks.begin(), s.stacks.end());
  s.stacks.erase(std::unique(s.stacks.begin(), s.stacks.end()), s.stacks.end());
  return s;
}

int32_t GrammarMatcher::transition(int32_t n, uint8_t byte) {
  if (trans_.size() <= static_cast<size_t>(n)) trans_.resize(nodes_.size());
  if (trans_[n].empty()) trans_[n].assign(256, -1);
  if (trans_[n][byte] >= 0) return trans_[n][byte];
  NodeSet next;
  const Node at = nodes_[n];
  if (g_.sets[g_.elems[at.pos].arg].test(byte)) {
    begin_step();
    expand(at.pos + 1, at.parent, next);
  }
  results_.push_back(std::move(next));
  return trans_[n][byte] = static_cast<int32_t>(results_.size() - 1);
}

void GrammarMatcher::step(const NodeSet& in, uint8_t byte, NodeSet& out) {
  out.clear();
  if (in.size() == 1 && in[0] != kAccept) {  // the common case: one way to go on
    out = results_[transition(in[0], byte)];
    return;
  }
  if (++mark_epoch_ == 0) {
    std::fill(marks_.begin(), marks_.end(), 0);
    mark_epoch_ = 1;
  }
  bool accepted = false;
  for (int32_t n : in) {
    if (n == kAccept) continue;
    const int32_t r = transition(n, byte);
    marks_.resize(nodes_.size(), 0);
    for (int32_t m : results_[r]) {
      if (m == kAccept) {
        if (!accepted) out.push_back(kAccept);
        accepted = true;
      } else if (marks_[m] != mark_epoch_) {
        marks_[m] = mark_epoch_;
        if (out.size() < kMaxStacks) {
          out.push_back(m);
        } else {
          limited_ = true;
        }
      }
    }
  }
}

GrammarState GrammarMatcher::start() {
  NodeSet set;
  begin_step();
  for (int32_t alt : g_.alts[g_.root]) expand(alt, -1, set);
  GrammarState s = export_state(set);
  reset();
  return s;
}

GrammarState GrammarMatcher::advance(const GrammarState& state, std::string_view bytes) {
  NodeSet set = import(state), next;
  for (char c : bytes) {
    step(set, static_cast<uint8_t>(c), next);
    set.swap(next);
    if (set.empty()) break;
  }
  GrammarState s = export_state(set);
  reset();
  return s;
}

}  // namespace kiln
