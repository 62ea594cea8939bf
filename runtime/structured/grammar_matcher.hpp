// Where a text stands in a Grammar: every way it can go on, as stacks of grammar positions (the
// pushdown automaton of llama.cpp's grammar sampler, over bytes). A stack's top is a Bytes element
// still to match, the positions below it what follows once its rule ends; an empty stack means
// the text may end here.
//
// Stacks are kept as interned (position, parent) nodes while a step or a vocabulary walk runs, so
// an expansion is done once per distinct node (no exponential blow-up on ambiguous grammars) and
// advancing a byte copies nothing.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/structured/grammar.hpp"

namespace kiln {

// The stacks between tokens, bottom first, sorted: equal states compare equal.
struct GrammarState {
  std::vector<std::vector<int32_t>> stacks;

  bool dead() const { return stacks.empty(); }
  bool can_end() const { return !stacks.empty() && stacks.front().empty(); }  // sorted: the empty stack first
  std::string key() const;  // the bytes of the stacks, for caches
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(const Grammar& g) : g_(g) {}

  GrammarState start();
  // The state after `bytes` (dead when the grammar cannot continue with them).
  GrammarState advance(const GrammarState& state, std::string_view bytes);

  // For walks over many continuations (the vocabulary): a state's node set, and one byte's step.
  using NodeSet = std::vector<int32_t>;  // node ids; kAccept: the text may end
  static constexpr int32_t kAccept = -1;
  NodeSet import(const GrammarState& state);
  GrammarState export_state(const NodeSet& set) const;
  void step(const NodeSet& in, uint8_t byte, NodeSet& out);
  // Forgets every node: the NodeSets held so far become invalid.
  void reset();
  // Whether a limit below dropped a way to go on since the matcher was made (start() checks it:
  // a grammar must begin within the limits; later, deeper nesting is what a limit refuses).
  bool limited() const { return limited_; }

  static constexpr int32_t kMaxDepth = 2048;   // deeper stacks are dropped (nesting beyond this is refused)
  static constexpr size_t kMaxStacks = 4096;   // ways a text may go on; past this the rest are dropped
  // Rules entered within one another before a byte (a client's chain a ::= b, b ::= c, ...): past
  // this the expansion stops there, so the thread's stack cannot overflow.
  static constexpr int kMaxCalls = 4096;

 private:
  struct Node {
    int32_t pos, parent, depth;
  };
  int32_t node(int32_t pos, int32_t parent);
  // The nodes after node n takes `byte` (an index into results_), expanded once per (n, byte): a
  // vocabulary walk steps the same few nodes over the same bytes many thousands of times.
  int32_t transition(int32_t n, uint8_t byte);
  void expand(int32_t pos, int32_t parent, NodeSet& out);
  void begin_step();

  const Grammar& g_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> index_;
  // Per node, the step (epoch) that last expanded it: each is expanded once a step.
  std::vector<uint32_t> expanded_;
  uint32_t epoch_ = 0;
  int calls_ = 0;
  bool limited_ = false;
  std::vector<std::vector<int32_t>> trans_;  // per node: 256 entries, -1 not computed yet (or none)
  std::vector<NodeSet> results_;
  std::vector<uint32_t> marks_;  // per node: the step that put it in step()'s output
  uint32_t mark_epoch_ = 0;
  bool accepted_ = false;
};

}  // namespace kiln
