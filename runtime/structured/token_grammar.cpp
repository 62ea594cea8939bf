#include "runtime/structured/token_grammar.hpp"

#include <algorithm>
#include <deque>
#include <numeric>

#include "runtime/core/error.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace kiln {

VocabTrie::VocabTrie(int32_t vocab_size, const std::function<std::string(int32_t)>& bytes,
                     const std::function<bool(int32_t)>& special)
    : vocab_size_(vocab_size) {
  offsets_.reserve(static_cast<size_t>(vocab_size) + 1);
  offsets_.push_back(0);
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (!special(id)) {
      const std::string b = bytes(id);
      if (!b.empty()) {
        text_ += b;
        order.push_back(id);
      }
    }
    offsets_.push_back(static_cast<int64_t>(text_.size()));
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const std::string_view x = this->bytes(a), y = this->bytes(b);
    return x != y ? x < y : a < b;
  });
  // Breadth first, so that each node's children are contiguous: a node covers order[lo, hi), the
  // tokens whose bytes start with its path of `depth` bytes (the ones that end here sort first).
  struct Work {
    int32_t node;
    size_t lo, hi, depth;
  };
  nodes_.push_back(Node{});
  std::deque<Work> queue{{0, 0, order.size(), 0}};
  while (!queue.empty()) {
    const Work w = queue.front();
    queue.pop_front();
    size_t i = w.lo;
    nodes_[w.node].token_begin = static_cast<int32_t>(ids_.size());
    for (; i < w.hi && this->bytes(order[i]).size() == w.depth; ++i) ids_.push_back(order[i]);
    nodes_[w.node].token_end = static_cast<int32_t>(ids_.size());
    nodes_[w.node].child_begin = static_cast<int32_t>(nodes_.size());
    while (i < w.hi) {
      const uint8_t b = static_cast<uint8_t>(this->bytes(order[i])[w.depth]);
      size_t j = i;
      while (j < w.hi && static_cast<uint8_t>(this->bytes(order[j])[w.depth]) == b) ++j;
      Node child;
      child.byte = b;
      queue.push_back(Work{static_cast<int32_t>(nodes_.size()), i, j, w.depth + 1});
      nodes_.push_back(child);
      i = j;
    }
    nodes_[w.node].child_end = static_cast<int32_t>(nodes_.size());
  }
  // Children come after their parents (breadth first): the longest tokens below, bottom up.
  for (size_t i = nodes_.size(); i-- > 0;) {
    Node& n = nodes_[i];
    if (n.token_end > n.token_begin) n.longest = static_cast<int32_t>(this->bytes(ids_[n.token_begin]).size());
    for (int32_t c = n.child_begin; c < n.child_end; ++c) n.longest = std::max(n.longest, nodes_[c].longest);
  }
  const size_t words = (static_cast<size_t>(vocab_size) + 63) / 64;
  up_to_.assign(kShortBytes + 1, std::vector<TokenMaskWord>(words, 0));
  for (int32_t id = 0; id < vocab_size; ++id) {
    const size_t n = this->bytes(id).size();  // 0: a token that never matches
    if (n == 0) continue;
    for (size_t b = n; b <= kShortBytes; ++b) up_to_[b][id / 64] |= TokenMaskWord{1} << (id % 64);
  }
}

std::shared_ptr<const VocabTrie> VocabTrie::of(const Tokenizer& tokenizer) {
  return std::make_shared<const VocabTrie>(
      static_cast<int32_t>(tokenizer.vocab_size()),
      [&](int32_t id) { return std::string(tokenizer.token_bytes(id)); },
      [&](int32_t id) { return tokenizer.is_special(id); });
}

namespace {

class TokenGrammarState : public TokenConstraintState {
 public:
  TokenGrammarState(std::shared_ptr<const TokenGrammar> grammar, GrammarState state)
      : grammar_(std::move(grammar)), state_(std::move(state)) {}

  void allowed(int32_t vocab_size, std::span<TokenMaskWord> out, bool& can_end) override {
    const std::shared_ptr<const TokenGrammar::Mask> mask = grammar_->mask(state_);
    // Ids past the tokenizer's vocabulary (a model's padded one) stay banned: they have no text.
    const size_t words = std::min(out.size(), mask->allowed.size());
    std::copy_n(mask->allowed.begin(), words, out.begin());
    std::fill(out.begin() + static_cast<std::ptrdiff_t>(words), out.end(), TokenMaskWord{0});
    if (!out.empty()) out.back() &= last_mask_word_bits(vocab_size);
    can_end = mask->can_end;
  }

  void accept(int32_t token) override { state_ = grammar_->advance(state_, token); }

 private:
  std::shared_ptr<const TokenGrammar> grammar_;
  GrammarState state_;
};

}  // namespace

std::shared_ptr<const TokenGrammar> TokenGrammar::make(Grammar grammar, std::shared_ptr<const VocabTrie> vocab) {
  return std::make_shared<const TokenGrammar>(std::move(grammar), std::move(vocab));
}

TokenGrammar::TokenGrammar(Grammar grammar, std::shared_ptr<const VocabTrie> vocab)
    : grammar_(std::move(grammar)), repeats_(grammar_), vocab_(std::move(vocab)) {
  GrammarMatcher matcher(grammar_);
  start_ = matcher.start();
  if (start_.dead()) {
    fail("grammar: rule '", grammar_.names[grammar_.root], "' matches nothing within the matcher's limits (rules nested ",
         GrammarMatcher::kMaxCalls, " deep before a character, or stacks ", GrammarMatcher::kMaxDepth, " deep)");
  }
  if (matcher.limited()) {
    fail("grammar: rule '", grammar_.names[grammar_.root], "' begins in more ways than the matcher follows (",
         GrammarMatcher::kMaxStacks, " stacks, rules nested ", GrammarMatcher::kMaxCalls, " deep): some of its sentences "
         "could never be written");
  }
}

std::shared_ptr<const TokenGrammar> TokenGrammar::make_checked(Grammar grammar, std::shared_ptr<const VocabTrie> vocab) {
  auto g = make(std::move(grammar), std::move(vocab));
  // The first mask, computed (and cached) here on the caller's thread: a grammar too ambiguous to
  // follow over the vocabulary is refused before it reaches the engine.
  if (g->mask(g->start_)->too_costly) {
    fail("grammar: rule '", g->grammar_.names[g->grammar_.root], "' is too ambiguous to follow over the vocabulary (",
         "more than ", kMaxWalkWork, " steps of its matcher for the first token): write it with fewer ways to match "
         "the same text");
  }
  return g;
}

std::unique_ptr<TokenConstraintState> TokenGrammar::start() const {
  return std::make_unique<TokenGrammarState>(shared_from_this(), start_);
}

GrammarState TokenGrammar::advance(const GrammarState& state, int32_t token) const {
  if (token < 0 || token >= vocab_->vocab_size()) return GrammarState{};
  const std::string_view bytes = vocab_->bytes(token);
  if (bytes.empty()) return GrammarState{};  // a special token: no text the grammar could take
  GrammarMatcher matcher(grammar_);
  return matcher.advance(state, bytes);
}

std::shared_ptr<const TokenGrammar::Mask> TokenGrammar::mask(const GrammarState& state) const {
  const std::string key = state.key();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      recent_.splice(recent_.begin(), recent_, it->second.second);
      return it->second.first;
    }
  }
  auto mask = std::make_shared<const Mask>(compute(state));
  std::lock_guard<std::mutex> lock(mutex_);
  if (cache_.count(key)) return mask;  // another thread walked the same state meanwhile
  if (cache_.size() >= kCachedMasks) {  // the least recently used goes
    cache_.erase(recent_.back());
    recent_.pop_back();
  }
  recent_.push_front(key);
  cache_.emplace(key, std::make_pair(mask, recent_.begin()));
  return mask;
}

// A walk that stopped at kMaxWalkWork: nothing allowed, and the text ends here rather than stall
// every request of the engine.
TokenGrammar::Mask TokenGrammar::too_costly(Mask m) {
  m.too_costly = true;
  m.allowed.assign(m.allowed.size(), 0);
  m.can_end = true;
  return m;
}

size_t TokenGrammar::shared_masks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return shared_;
}

TokenGrammar::Mask TokenGrammar::compute(const GrammarState& state) const {
  RepeatCounts::Canonical canon = repeats_.canonical(state, kSharedBytes);
  // Where the two agree on no more than single bytes, the walk for the rest is the whole walk.
  if (!canon.changed || canon.agree_bytes < 2) return walk(state, 0);
  const std::shared_ptr<const Mask> shared = mask(canon.state);  // canonical: walked whole
  Mask m = walk(state, canon.agree_bytes);
  if (shared->too_costly || m.too_costly) return too_costly(std::move(m));
  const std::vector<TokenMaskWord>& shorter = vocab_->tokens_up_to(static_cast<int>(canon.agree_bytes));
  bool any = false;
  for (size_t w = 0; w < m.allowed.size(); ++w) {
    m.allowed[w] |= shared->allowed[w] & shorter[w];
    any = any || m.allowed[w] != 0;
  }
  m.can_end = state.can_end() || !any;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++shared_;
  }
  return m;
}

TokenGrammar::Mask TokenGrammar::walk(const GrammarState& state, int64_t skip_bytes) const {
  Mask m;
  m.allowed.assign((static_cast<size_t>(vocab_->vocab_size()) + 63) / 64, 0);
  m.can_end = state.can_end();
  if (state.dead()) {
    m.can_end = true;  // nothing can follow: let the request end rather than ban every token
    return m;
  }
  GrammarMatcher matcher(grammar_);
  const std::vector<VocabTrie::Node>& nodes = vocab_->nodes();
  std::vector<GrammarMatcher::NodeSet> sets(1);
  sets[0] = matcher.import(state);
  // Depth first over the trie; sets[d] holds the grammar's stacks after a path of d bytes.
  size_t work = 0;  // stacks stepped
  const auto visit = [&](auto& self, int32_t at, size_t depth) -> void {
    if (sets.size() <= depth + 1) sets.emplace_back();
    for (int32_t c = nodes[at].child_begin; c < nodes[at].child_end; ++c) {
      if (nodes[c].longest <= skip_bytes) continue;  // every token below is one the caller has
      work += sets[depth].size();
      if (work > kMaxWalkWork) return;
      matcher.step(sets[depth], nodes[c].byte, sets[depth + 1]);
      const GrammarMatcher::NodeSet& next = sets[depth + 1];
      if (next.empty()) continue;
      if (static_cast<int64_t>(depth) + 1 > skip_bytes) {  // the tokens spelled by this path
        const int32_t* ids = vocab_->tokens(nodes[c]);
        for (int32_t k = 0; k < nodes[c].token_end - nodes[c].token_begin; ++k) {
          m.allowed[ids[k] / 64] |= uint64_t{1} << (ids[k] % 64);
        }
      }
      const bool only_end = next.size() == 1 && next[0] == GrammarMatcher::kAccept;
      if (!only_end) self(self, c, depth + 1);
    }
  };
  visit(visit, 0, 0);
  if (work > kMaxWalkWork) return too_costly(std::move(m));
  bool any = false;
  for (uint64_t w : m.allowed) any = any || w != 0;
  if (!any) m.can_end = true;  // the grammar wants bytes no token spells: end rather than ban all
  return m;
}

}  // namespace kiln
