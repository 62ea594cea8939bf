#include "runtime/structured/structured_outputs.hpp"

#include "runtime/structured/grammar.hpp"
#include "runtime/structured/json_schema_grammar.hpp"
#include "runtime/structured/regex_grammar.hpp"
#include "runtime/structured/token_grammar.hpp"

namespace kiln {

std::shared_ptr<const VocabTrie> StructuredOutputs::vocab() {
  // Under mutex_ (the callers hold it).
  if (!vocab_) vocab_ = VocabTrie::of(tokenizer_);
  return vocab_;
}

std::shared_ptr<const TokenConstraint> StructuredOutputs::grammar(const std::string& gbnf) {
  std::shared_ptr<const VocabTrie> trie;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (it->first != gbnf) continue;
      cache_.splice(cache_.begin(), cache_, it);
      return cache_.front().second;
    }
    trie = vocab();
  }
  // Parsed (and its first mask computed) outside the lock: a large grammar does not hold up other
  // requests.
  std::shared_ptr<const TokenConstraint> made = TokenGrammar::make_checked(Grammar::parse(gbnf), trie);
  std::lock_guard<std::mutex> lock(mutex_);
  cache_.emplace_front(gbnf, made);
  if (cache_.size() > kCachedGrammars) cache_.pop_back();
  return made;
}

std::shared_ptr<const TokenConstraint> StructuredOutputs::json_schema(const nlohmann::ordered_json& schema, bool compact) {
  return grammar(json_schema_gbnf(schema, compact));
}

std::shared_ptr<const TokenConstraint> StructuredOutputs::json_object(bool compact) {
  return grammar(json_object_gbnf(compact));
}

std::shared_ptr<const TokenConstraint> StructuredOutputs::regex(const std::string& pattern) {
  return grammar("root ::= " + regex_gbnf(pattern, RegexText::raw) + "\n");
}

std::shared_ptr<const TokenConstraint> StructuredOutputs::choice(const std::vector<std::string>& choices) {
  return grammar(choice_gbnf(choices));
}

}  // namespace kiln
