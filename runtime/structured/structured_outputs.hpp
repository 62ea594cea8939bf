// Structured output for one tokenizer: the TokenConstraint of a JSON schema, of any JSON object, of
// a list of choices or of a GBNF grammar. The vocabulary trie is built at the first request that
// asks (a tenth of a second for 128K tokens) and compiled grammars are kept by their text, so a
// client sending the same schema again reuses the masks the earlier answers computed. Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "runtime/serving/token_constraint.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace kiln {

class VocabTrie;

class StructuredOutputs {
 public:
  // Keeps its own handle of the tokenizer (a copy shares the vocabulary): the caller's may move.
  explicit StructuredOutputs(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Each throws kiln::Error saying what is wrong with the schema, list or grammar.
  // compact: no whitespace between JSON tokens.
  std::shared_ptr<const TokenConstraint> json_schema(const nlohmann::ordered_json& schema, bool compact = false);
  std::shared_ptr<const TokenConstraint> json_object(bool compact = false);
  std::shared_ptr<const TokenConstraint> choice(const std::vector<std::string>& choices);
  std::shared_ptr<const TokenConstraint> grammar(const std::string& gbnf);
  // The whole text matches the regex (regex_grammar.hpp's subset).
  std::shared_ptr<const TokenConstraint> regex(const std::string& pattern);

  static constexpr size_t kCachedGrammars = 32;

 private:
  std::shared_ptr<const VocabTrie> vocab();

  Tokenizer tokenizer_;
  std::mutex mutex_;
  std::shared_ptr<const VocabTrie> vocab_;
  std::list<std::pair<std::string, std::shared_ptr<const TokenConstraint>>> cache_;  // most recent first
};

}  // namespace kiln
