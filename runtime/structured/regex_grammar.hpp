// Regular expressions as GBNF (grammar.hpp), for vLLM's guided_regex and a JSON schema's
// "pattern". The ECMAScript subset JSON schemas use: literals and escapes (\d \w \s \D \W \S,
// \n \t \r \f \v, \xHH, \uHHHH, escaped punctuation), classes [a-z...] and [^...], '.', groups
// ( ) and (?: ), alternation |, and the quantifiers * + ? {m} {m,} {m,n} (a lazy '?' after them
// changes what matches nothing here: the whole text must match). ^ and $ anchor the ends; anything
// else (lookaround, back-references, \b) is an error naming it.
#pragma once

#include <string>
#include <string_view>

namespace kiln {

enum class RegexText {
  raw,          // the text itself (guided_regex: the whole answer matches)
  json_string,  // the inside of a JSON string: '"', '\' and control characters escaped as JSON writes them
};

// A GBNF expression (no rules of its own; parenthesised) for the strings the regex matches. In
// json_string mode an unanchored start or end (a pattern searches: "a+" allows "xax") lets any
// string characters stand there. Throws kiln::Error "pattern '<p>': ..." for what it cannot take.
std::string regex_gbnf(std::string_view pattern, RegexText mode);

}  // namespace kiln
