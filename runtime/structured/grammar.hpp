// A context-free grammar over bytes, for structured output: the answer's text must be a sentence
// of it. Written in llama.cpp's GBNF (grammars/README.md there), which JSON schemas compile to
// (json_schema_grammar.hpp) and which `guided_grammar` takes as is:
//
//   root   ::= object                      # rules: name ::= alternatives; `root` is the start
//   object ::= "{" ws (pair ("," ws pair)*)? "}"
//   pair   ::= [a-z]+ ws ":" ws ("true" | "false") ws
//   ws     ::= [ \t\n]{0,4}
//
// Terminals are literals ("..."), classes ([a-z0-9], [^"\\], with \n \t \r \\ \" \] \xHH \uHHHH
// \UHHHHHHHH escapes) and `.` (any character); postfix * + ? {m} {m,} {m,n} repeat. Classes are
// over Unicode code points, compiled to the UTF-8 byte sequences that spell them, so the grammar
// matches bytes and a token that ends inside a character needs no special case.
//
// Grammars come from clients: parse() throws kiln::Error naming the rule and what is wrong for
// undefined rules, left recursion (which would expand forever) and oversized repetitions.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct Grammar {
  enum class Kind : uint8_t {
    End,    // the end of an alternative
    Bytes,  // one byte from sets[arg]
    Ref,    // rule arg
  };
  struct Elem {
    Kind kind;
    int32_t arg;
  };
  // Every alternative of every rule, one after another, each closed by an End element.
  std::vector<Elem> elems;
  std::vector<std::bitset<256>> sets;      // the byte sets Bytes elements name
  std::vector<std::vector<int32_t>> alts;  // per rule: the index in elems of each alternative's first element
  std::vector<std::string> names;          // per rule (helper rules: "<rule>#<n>")
  int32_t root = 0;
  // The optional copies of each bounded repetition x{m,n} (n > m + 1) as the parser built them:
  // rules[k] ::= x rules[k-1] | (empty), rules[0] ::= x | (empty), so rules[k] allows k + 1 more
  // copies of x (repeat_counts.hpp lets the states that differ only in that count share masks).
  struct Repetition {
    std::vector<int32_t> rules;
  };
  std::vector<Repetition> repetitions;

  // Throws kiln::Error on a syntax error (with the line), an undefined or missing rule, left
  // recursion, or more than kMaxElems elements after repetitions are expanded.
  static Grammar parse(std::string_view gbnf, std::string_view root = "root");

  static constexpr int32_t kMaxElems = 1 << 20;
  static constexpr int32_t kMaxRepeat = 4096;  // the largest m or n of x{m,n}
};

}  // namespace kiln
