// What a grammar makes of a text, for the structured-output tests: a whole sentence of it, or the
// start of one.
#pragma once

#include <string>

#include "runtime/structured/grammar.hpp"
#include "runtime/structured/grammar_matcher.hpp"

namespace kiln::test {

inline bool grammar_accepts(const Grammar& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.advance(m.start(), text).can_end();
}

inline bool grammar_prefix(const Grammar& g, const std::string& text) {
  GrammarMatcher m(g);
  return !m.advance(m.start(), text).dead();
}

}  // namespace kiln::test
