#include "runtime/structured/grammar.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>

#include "runtime/core/error.hpp"
#include "runtime/structured/code_ranges.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace kiln {
namespace {

using Elem = Grammar::Elem;
using Kind = Grammar::Kind;
using Seq = std::vector<Elem>;
using CodeRange = code_ranges::Range;
using ByteRange = std::pair<uint8_t, uint8_t>;

constexpr uint32_t kMaxCodePoint = code_ranges::kMaxCodePoint;

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

std::string utf8_encode(uint32_t cp) {
  std::string s;
  utf8::append(s, static_cast<char32_t>(cp));
  return s;
}

// The UTF-8 encodings of the code points [lo, hi] (no surrogates inside) as sequences of byte
// ranges, each a product of its positions' ranges (the construction of Rust's utf8-ranges and Go's
// regexp/syntax): split at the encoding lengths' bounds, then wherever a continuation byte's range
// would not be whole.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>& out) {
  if (lo > hi) return;
  for (uint32_t bound : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= bound && hi > bound) {
      utf8_sequences(lo, bound, out);
      utf8_sequences(bound + 1, hi, out);
      return;
    }
  }
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = utf8_encode(lo), b = utf8_encode(hi);
  std::vector<ByteRange> seq;
  for (size_t k = 0; k < a.size(); ++k) seq.emplace_back(static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k]));
  out.push_back(std::move(seq));
}

// Sorted, merged ranges (their complement when negated), surrogates removed.
std::vector<CodeRange> normalize(std::vector<CodeRange> ranges, bool negate) {
  return code_ranges::minus(negate ? code_ranges::complement(ranges) : code_ranges::normalized(std::move(ranges)),
                            code_ranges::kSurrogates);
}

class Parser {
 public:
  Parser(std::string_view text, Grammar& g) : text_(text), g_(g) {}

  void parse_all() {
    if (!utf8::is_valid(text_)) fail("grammar: the text is not valid UTF-8");
    skip_space();
    while (pos_ < text_.size()) {
      const std::string name = parse_name();
      skip_space();
      if (!consume("::=")) error("expected '::=' after the rule name '" + name + "'");
      const int32_t rule = rule_index(name);
      if (defined_[rule]) error("rule '" + name + "' is defined twice");
      defined_[rule] = true;
      rules_[rule] = parse_alternatives(name, false);
      skip_space();
    }
  }

  // Checks and flattens into g_.
  void finish(std::string_view root) {
    for (size_t r = 0; r < rules_.size(); ++r) {
      if (!defined_[r]) fail("grammar: rule '", g_.names[r], "' is used but never defined");
    }
    const auto it = index_.find(std::string(root));
    if (it == index_.end()) fail("grammar: no rule named '", root, "' (the start rule)");
    g_.root = it->second;
    check_left_recursion();
    size_t total = 0;
    for (const auto& alts : rules_) {
      for (const Seq& s : alts) total += s.size() + 1;
    }
    if (total > static_cast<size_t>(Grammar::kMaxElems)) {
      fail("grammar: ", total, " elements after repetitions are expanded (at most ", Grammar::kMaxElems, ")");
    }
    g_.alts.assign(rules_.size(), {});
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Seq& s : rules_[r]) {
        g_.alts[r].push_back(static_cast<int32_t>(g_.elems.size()));
        g_.elems.insert(g_.elems.end(), s.begin(), s.end());
        g_.elems.push_back(Elem{Kind::End, 0});
      }
    }
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    const int64_t line = 1 + std::count(text_.begin(), text_.begin() + std::min(pos_, text_.size()), '\n');
    fail("grammar: line ", line, ": ", what);
  }

  void skip_space() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }
  bool consume(std::string_view s) {
    if (text_.substr(pos_, s.size()) != s) return false;
    pos_ += s.size();
    return true;
  }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  std::string parse_name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && name_char(text_[pos_])) ++pos_;
    if (pos_ == start) error("expected a rule name");
    return std::string(text_.substr(start, pos_ - start));
  }
  // Whether a new rule ("name ::=") starts at pos_.
  bool at_rule_start() {
    const size_t save = pos_;
    size_t p = pos_;
    while (p < text_.size() && name_char(text_[p])) ++p;
    if (p == pos_) return false;
    pos_ = p;
    skip_space();
    const bool yes = text_.substr(pos_, 3) == "::=";
    pos_ = save;
    return yes;
  }

  int32_t rule_index(const std::string& name) {
    const auto [it, added] = index_.try_emplace(name, static_cast<int32_t>(rules_.size()));
    if (added) {
      rules_.emplace_back();
      defined_.push_back(false);
      g_.names.push_back(name);
    }
    return it->second;
  }
  int32_t helper_rule(const std::string& owner, std::vector<Seq> alts) {
    const int32_t r = rule_index(owner + "#" + std::to_string(helpers_++));
    rules_[r] = std::move(alts);
    defined_[r] = true;
    return r;
  }
  int32_t byte_set(const std::bitset<256>& set) {
    const std::string key = set.to_string();
    const auto [it, added] = sets_.try_emplace(key, static_cast<int32_t>(g_.sets.size()));
    if (added) g_.sets.push_back(set);
    return it->second;
  }
  Elem byte_elem(uint8_t lo, uint8_t hi) {
    std::bitset<256> set;
    for (int b = lo; b <= hi; ++b) set.set(b);
    return Elem{Kind::Bytes, byte_set(set)};
  }

  std::vector<Seq> parse_alternatives(const std::string& owner, bool nested) {
    if (++nesting_ > kMaxNesting) error("parentheses nest deeper than " + std::to_string(kMaxNesting));
    struct Leave {
      int& n;
      ~Leave() { --n; }
    } leave{nesting_};
    std::vector<Seq> alts;
    alts.push_back(parse_sequence(owner, nested));
    while (true) {
      skip_space();
      if (!consume("|")) break;
      alts.push_back(parse_sequence(owner, nested));
    }
    return alts;
  }

  Seq parse_sequence(const std::string& owner, bool nested) {
    Seq seq;
    size_t unit = 0;  // where the last element (what a postfix repeats) starts in seq
    bool have_unit = false;
    while (true) {
      skip_space();
      if (pos_ >= text_.size()) break;
      const char c = text_[pos_];
      if (c == '|' || (c == ')' && nested)) break;
      if (c == ')') error("')' without '('");
      if (!nested && at_rule_start()) break;
      if (c == '"') {
        ++pos_;
        unit = seq.size();
        have_unit = true;
        const size_t before = seq.size();
        while (true) {
          if (pos_ >= text_.size()) error("unterminated literal");
          if (text_[pos_] == '"') {
            ++pos_;
            break;
          }
          for (unsigned char b : utf8_encode(parse_char())) seq.push_back(byte_elem(b, b));
        }
        if (seq.size() == before) have_unit = false;  // "" matches the empty string: nothing to repeat
      } else if (c == '[') {
        ++pos_;
        unit = seq.size();
        have_unit = true;
        seq.push_back(parse_class(owner));
      } else if (c == '.') {
        ++pos_;
        unit = seq.size();
        have_unit = true;
        seq.push_back(class_elem(owner, {{0, kMaxCodePoint}}, false));
      } else if (c == '(') {
        ++pos_;
        std::vector<Seq> alts = parse_alternatives(owner, true);
        skip_space();
        if (!consume(")")) error("expected ')'");
        unit = seq.size();
        have_unit = true;
        seq.push_back(Elem{Kind::Ref, helper_rule(owner, std::move(alts))});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_unit) error(std::string("'") + c + "' repeats nothing");
        ++pos_;
        int32_t lo = 0, hi = -1;  // hi -1: unbounded
        if (c == '+') lo = 1;
        if (c == '?') hi = 1;
        if (c == '{') parse_braces(lo, hi);
        Seq x(seq.begin() + static_cast<std::ptrdiff_t>(unit), seq.end());
        seq.resize(unit);
        repeat(owner, x, lo, hi, seq);
        have_unit = false;
      } else if (name_char(c)) {
        unit = seq.size();
        have_unit = true;
        seq.push_back(Elem{Kind::Ref, rule_index(parse_name())});
      } else {
        error(std::string("unexpected character '") + c + "'");
      }
    }
    return seq;
  }

  void parse_braces(int32_t& lo, int32_t& hi) {
    const auto number = [&]() -> int32_t {
      skip_space();
      int64_t v = 0;
      const size_t start = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        v = v * 10 + (text_[pos_++] - '0');
        if (v > Grammar::kMaxRepeat) error("repetition count above " + std::to_string(Grammar::kMaxRepeat));
      }
      if (pos_ == start) error("expected a number in '{...}'");
      return static_cast<int32_t>(v);
    };
    lo = number();
    skip_space();
    if (consume(",")) {
      skip_space();
      hi = pos_ < text_.size() && text_[pos_] == '}' ? -1 : number();
    } else {
      hi = lo;
    }
    skip_space();
    if (!consume("}")) error("expected '}'");
    if (hi >= 0 && hi < lo) error("repetition {" + std::to_string(lo) + "," + std::to_string(hi) + "}: max below min");
  }

  // x{lo,hi} appended to seq: x lo times, then x* (hi -1) or (x (x (...)?)?)? up to hi.
  void repeat(const std::string& owner, const Seq& x, int32_t lo, int32_t hi, Seq& seq) {
    // Counted as it goes, across every rule, before anything is built: the copies of x, and a
    // helper rule of x and its end (and the reference to it) for each optional one past lo.
    const size_t copies = static_cast<size_t>(lo) + (hi < 0 ? 1 : static_cast<size_t>(hi - lo));
    expanded_ += copies * (x.size() + 3);
    if (seq.size() + expanded_ > static_cast<size_t>(Grammar::kMaxElems)) {
      error("repetitions expand past " + std::to_string(Grammar::kMaxElems) + " elements");
    }
    for (int32_t i = 0; i < lo; ++i) seq.insert(seq.end(), x.begin(), x.end());
    if (hi < 0) {
      const int32_t r = rule_index(owner + "#" + std::to_string(helpers_++));  // r ::= x r |
      Seq loop = x;
      loop.push_back(Elem{Kind::Ref, r});
      rules_[r] = {loop, Seq{}};
      defined_[r] = true;
      seq.push_back(Elem{Kind::Ref, r});
      return;
    }
    int32_t tail = -1;  // (x tail)? built from the innermost out
    Grammar::Repetition chain;
    for (int32_t i = lo; i < hi; ++i) {
      Seq body = x;
      if (tail >= 0) body.push_back(Elem{Kind::Ref, tail});
      tail = helper_rule(owner, {body, Seq{}});
      chain.rules.push_back(tail);
    }
    if (tail >= 0) seq.push_back(Elem{Kind::Ref, tail});
    if (chain.rules.size() > 1) g_.repetitions.push_back(std::move(chain));
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // One character of a literal or class (escapes decoded; the text's UTF-8 decoded).
  uint32_t parse_char() {
    if (pos_ >= text_.size()) error("unexpected end of the grammar");
    if (text_[pos_] == '\\') {
      if (pos_ + 1 >= text_.size()) error("'\\' at the end of the grammar");
      const char e = text_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': return static_cast<uint32_t>(e);
        case 'x': case 'u': case 'U': {
          const int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t v = 0;
          for (int i = 0; i < digits; ++i) {
            const int h = pos_ < text_.size() ? hex_value(text_[pos_]) : -1;
            if (h < 0) error(std::string("'\\") + e + "' needs " + std::to_string(digits) + " hex digits");
            v = v * 16 + static_cast<uint32_t>(h);
            ++pos_;
          }
          if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) error("escape names no Unicode character");
          return v;
        }
        default: error(std::string("unknown escape '\\") + e + "'");
      }
    }
    return static_cast<uint32_t>(utf8::next(text_, pos_));  // parse_all() checked the text is UTF-8
  }

  Elem parse_class(const std::string& owner) {
    const bool negate = consume("^");
    std::vector<CodeRange> ranges;
    while (true) {
      if (pos_ >= text_.size()) error("unterminated character class");
      if (text_[pos_] == ']') {
        ++pos_;
        break;
      }
      const uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char();
        if (hi < lo) error("class range out of order");
      }
      ranges.emplace_back(lo, hi);
    }
    return class_elem(owner, std::move(ranges), negate);
  }

  // One byte set when every code point is ASCII; else a helper rule of the UTF-8 byte sequences.
  Elem class_elem(const std::string& owner, std::vector<CodeRange> ranges, bool negate) {
    ranges = normalize(std::move(ranges), negate);
    if (ranges.empty()) error("the character class matches nothing");
    std::vector<std::vector<ByteRange>> seqs;
    for (const CodeRange& r : ranges) utf8_sequences(r.first, r.second, seqs);
    std::bitset<256> ascii;
    std::vector<Seq> alts;
    for (const auto& s : seqs) {
      if (s.size() == 1) {
        for (int b = s[0].first; b <= s[0].second; ++b) ascii.set(b);
        continue;
      }
      Seq alt;
      for (const ByteRange& b : s) alt.push_back(byte_elem(b.first, b.second));
      alts.push_back(std::move(alt));
    }
    if (alts.empty()) return Elem{Kind::Bytes, byte_set(ascii)};
    if (ascii.any()) alts.insert(alts.begin(), Seq{Elem{Kind::Bytes, byte_set(ascii)}});
    return Elem{Kind::Ref, helper_rule(owner, std::move(alts))};
  }

  // A rule may not reach itself before matching a byte: the matcher would expand it forever.
  void check_left_recursion() const {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    const auto seq_nullable_prefix = [&](const Seq& s, const std::function<void(int32_t)>& on_ref) {
      for (const Elem& e : s) {
        if (e.kind == Kind::Bytes) return false;
        on_ref(e.arg);
        if (!nullable[e.arg]) return false;
      }
      return true;
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Seq& s : rules_[r]) {
          if (seq_nullable_prefix(s, [](int32_t) {})) {
            nullable[r] = true;
            changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<int32_t>> first(n);  // rules reachable before any byte
    for (size_t r = 0; r < n; ++r) {
      for (const Seq& s : rules_[r]) seq_nullable_prefix(s, [&](int32_t ref) { first[r].push_back(ref); });
    }
    // Depth first without recursion (a client's chain of rules may be long): a rule met again
    // while it is on the path is a cycle.
    std::vector<uint8_t> state(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<int32_t, size_t>> path;  // (rule, next edge)
    for (size_t start = 0; start < n; ++start) {
      if (state[start] != 0) continue;
      path.emplace_back(static_cast<int32_t>(start), 0);
      state[start] = 1;
      while (!path.empty()) {
        auto& [r, next] = path.back();
        if (next == first[r].size()) {
          state[r] = 2;
          path.pop_back();
          continue;
        }
        const int32_t s = first[r][next++];
        if (state[s] == 1) {
          fail("grammar: rule '", user_name(s), "' is left-recursive (it can reach itself before matching a character)");
        }
        if (state[s] == 0) {
          state[s] = 1;
          path.emplace_back(s, 0);
        }
      }
    }
  }
  // Helper rules are named "<rule>#<n>" after the rule they were written in.
  std::string user_name(int32_t r) const {
    const std::string& name = g_.names[r];
    return name.substr(0, name.find('#'));
  }

  std::string_view text_;
  size_t pos_ = 0;
  Grammar& g_;
  std::vector<std::vector<Seq>> rules_;
  std::vector<bool> defined_;
  std::unordered_map<std::string, int32_t> index_;
  std::unordered_map<std::string, int32_t> sets_;
  int32_t helpers_ = 0;
  size_t expanded_ = 0;  // elements repetitions have added, across every rule
  int nesting_ = 0;
  static constexpr int kMaxNesting = 256;
};

}  // namespace

Grammar Grammar::parse(std::string_view gbnf, std::string_view root) {
  Grammar g;
  Parser p(gbnf, g);
  p.parse_all();
  p.finish(root);
  return g;
}

}  // namespace kiln
