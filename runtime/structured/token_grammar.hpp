// A Grammar as a TokenConstraint: which of the vocabulary's tokens can come next.
//
// VocabTrie holds every token's bytes in a trie (built once per tokenizer and shared); a state's
// allowed tokens come from one walk of the trie that advances the grammar a byte per edge and
// prunes a subtree as soon as no stack survives, so a state in the middle of JSON punctuation
// visits a handful of nodes and one inside a string most of them. Masks are cached per grammar
// state (a response revisits the same few states: inside a string, after a comma, ...), shared by
// every sequence of the grammar; the states a bounded repetition makes, one per count ("maxLength":
// 60), take their short tokens from one canonical state's mask (repeat_counts.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/serving/token_constraint.hpp"
#include "runtime/structured/grammar.hpp"
#include "runtime/structured/grammar_matcher.hpp"
#include "runtime/structured/repeat_counts.hpp"

namespace kiln {

class Tokenizer;

class VocabTrie {
 public:
  // bytes(id) and special(id) for id in [0, vocab_size): special tokens (control, unknown) and
  // tokens of no bytes never match a grammar.
  VocabTrie(int32_t vocab_size, const std::function<std::string(int32_t)>& bytes,
            const std::function<bool(int32_t)>& special);
  static std::shared_ptr<const VocabTrie> of(const Tokenizer& tokenizer);

  struct Node {
    int32_t child_begin = 0, child_end = 0;  // children: nodes [child_begin, child_end), by byte
    int32_t token_begin = 0, token_end = 0;  // tokens spelled by the path to here: ids_[...]
    int32_t longest = 0;                     // bytes of the longest token at or below this node
    uint8_t byte = 0;                        // the edge from the parent
  };
  const std::vector<Node>& nodes() const { return nodes_; }  // nodes()[0]: the root
  const int32_t* tokens(const Node& n) const { return ids_.data() + n.token_begin; }
  int32_t vocab_size() const { return vocab_size_; }
  // A token's bytes; empty for one that never matches (special, or no bytes).
  std::string_view bytes(int32_t id) const {
    return std::string_view(text_).substr(offsets_[id], offsets_[id + 1] - offsets_[id]);
  }
  // The tokens of 1 to `bytes` bytes (bytes <= kShortBytes), bit per id.
  static constexpr int kShortBytes = 32;
  const std::vector<TokenMaskWord>& tokens_up_to(int bytes) const { return up_to_[bytes]; }

 private:
  int32_t vocab_size_;
  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;
  std::string text_;               // every matching token's bytes, by id
  std::vector<int64_t> offsets_;   // vocab_size + 1
  std::vector<std::vector<TokenMaskWord>> up_to_;  // [0, kShortBytes]
};

class TokenGrammar : public TokenConstraint, public std::enable_shared_from_this<TokenGrammar> {
 public:
  // Held by a shared_ptr (start() hands its states a reference). Throws kiln::Error when the
  // grammar's start matches nothing within GrammarMatcher's limits.
  static std::shared_ptr<const TokenGrammar> make(Grammar grammar, std::shared_ptr<const VocabTrie> vocab);
  // make(), and the start state's mask computed: throws kiln::Error when it costs more than
  // kMaxWalkWork (a grammar that is ambiguous on purpose), so that a request is refused up front.
  static std::shared_ptr<const TokenGrammar> make_checked(Grammar grammar, std::shared_ptr<const VocabTrie> vocab);
  TokenGrammar(Grammar grammar, std::shared_ptr<const VocabTrie> vocab);
  std::unique_ptr<TokenConstraintState> start() const override;

  // Allowed tokens of a state (bit per token id) and whether the text may end there.
  struct Mask {
    std::vector<TokenMaskWord> allowed;
    bool can_end = false;
    bool too_costly = false;  // the walk stopped at kMaxWalkWork: nothing allowed, the text may end
  };
  std::shared_ptr<const Mask> mask(const GrammarState& state) const;
  GrammarState advance(const GrammarState& state, int32_t token) const;
  const Grammar& grammar() const { return grammar_; }
  int32_t vocab_size() const { return vocab_->vocab_size(); }

  static constexpr size_t kCachedMasks = 256;
  // States that differ only in a bounded repetition's count share the mask of their canonical
  // state for tokens up to this many bytes (repeat_counts.hpp); the longer ones are walked.
  static constexpr int kSharedBytes = VocabTrie::kShortBytes;
  // Masks computed so far that took their short tokens from a canonical state's (for tests, benches).
  size_t shared_masks() const;
  // The most grammar stacks one mask's trie walk steps (a JSON string state over a 128K vocabulary
  // takes about a million): past it a state's mask ends the text instead of stalling the engine.
  static constexpr size_t kMaxWalkWork = size_t{1} << 24;

 private:
  // The tokens of more than `skip_bytes` bytes that state allows (all of them at 0).
  Mask walk(const GrammarState& state, int64_t skip_bytes) const;
  Mask compute(const GrammarState& state) const;
  static Mask too_costly(Mask m);

  Grammar grammar_;
  RepeatCounts repeats_;
  std::shared_ptr<const VocabTrie> vocab_;
  GrammarState start_;
  mutable std::mutex mutex_;
  // Masks by state key, each with its place in recent_ (most recently used first).
  mutable std::list<std::string> recent_;
  mutable std::unordered_map<std::string, std::pair<std::shared_ptr<const Mask>, std::list<std::string>::iterator>> cache_;
  mutable size_t shared_ = 0;
};

}  // namespace kiln
