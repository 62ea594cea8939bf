#include "runtime/structured/regex_grammar.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/structured/code_ranges.hpp"
#include "runtime/structured/grammar.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace kiln {
namespace {

using code_ranges::complement;
using code_ranges::minus;
using code_ranges::normalized;
using Range = code_ranges::Range;

// Any character of a JSON string, as JSON writes it (the JSON grammar's `char`).
constexpr const char* kJsonChar = R"(([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})))";

std::string escape(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, cp <= 0xFF ? "\\x%02X" : cp <= 0xFFFF ? "\\u%04X" : "\\U%08X", cp);
  return buf;
}
// A GBNF class of the ranges (never empty: the caller checks).
std::string gbnf_class(const std::vector<Range>& r) {
  std::string s = "[";
  for (const Range& x : r) s += x.first == x.second ? escape(x.first) : escape(x.first) + "-" + escape(x.second);
  return s + "]";
}

const std::vector<Range> kDigit = {{'0', '9'}};
const std::vector<Range> kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const std::vector<Range> kSpace = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                   {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};

class RegexCompiler {
 public:
  RegexCompiler(std::string_view pattern, RegexText mode) : text_(pattern), mode_(mode) {
    if (!utf8::is_valid(pattern)) bad("is not valid UTF-8");
    for (size_t i = 0; i < pattern.size();) cps_.push_back(static_cast<uint32_t>(utf8::next(pattern, i)));
  }

  std::string compile() {
    bool start_anchor = false, end_anchor = false;
    if (!cps_.empty() && cps_.front() == '^') {
      start_anchor = true;
      pos_ = 1;
    }
    // A final '$' is the end anchor unless escaped: an odd run of backslashes before it.
    size_t slashes = 0;
    while (cps_.size() >= slashes + 2 && cps_[cps_.size() - 2 - slashes] == '\\') ++slashes;
    if (cps_.size() > pos_ && cps_.back() == '$' && slashes % 2 == 0) {
      end_anchor = true;
      cps_.pop_back();
    }
    std::string body = alternation(0);
    if (pos_ != cps_.size()) bad("has an unmatched ')'");
    if (mode_ == RegexText::json_string && (!start_anchor || !end_anchor)) {  // a pattern searches the string
      body = "(" + body + ")";  // "cat|dog" is one choice between the padding
      if (!start_anchor) body = std::string(kJsonChar) + "* " + body;
      if (!end_anchor) body = body + " " + kJsonChar + "*";
    }
    return "(" + body + ")";
  }

 private:
  [[noreturn]] void bad(const std::string& what) const { fail("pattern '", text_, "' ", what); }

  bool at(uint32_t c) const { return pos_ < cps_.size() && cps_[pos_] == c; }

  std::string alternation(int depth) {
    if (depth > 64) bad("nests groups deeper than 64");
    std::string out = sequence(depth);
    while (at('|')) {
      ++pos_;
      out += " | " + sequence(depth);
    }
    return out;
  }

  std::string sequence(int depth) {
    std::string out;
    while (pos_ < cps_.size() && !at('|') && !at(')')) {
      std::string a = atom(depth);
      a = quantified(std::move(a));
      out += (out.empty() ? "" : " ") + a;
    }
    return out.empty() ? "\"\"" : out;
  }

  std::string quantified(std::string a) {
    if (pos_ >= cps_.size()) return a;
    const uint32_t c = cps_[pos_];
    std::string q;
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      q = std::string(1, static_cast<char>(c));
    } else if (c == '{') {
      const size_t save = pos_;
      ++pos_;
      const auto number = [&]() -> int64_t {
        int64_t v = -1;
        while (pos_ < cps_.size() && cps_[pos_] >= '0' && cps_[pos_] <= '9') {
          v = (v < 0 ? 0 : v) * 10 + (cps_[pos_++] - '0');
          if (v > Grammar::kMaxRepeat) bad("repeats more than " + std::to_string(Grammar::kMaxRepeat) + " times");
        }
        return v;
      };
      const int64_t lo = number();
      int64_t hi = lo;
      if (at(',')) {
        ++pos_;
        hi = number();  // -1: no upper bound
      }
      if (lo < 0 || !at('}')) {  // not a quantifier: ECMAScript reads it as text
        pos_ = save;
        return a;
      }
      ++pos_;
      if (hi >= 0 && hi < lo) bad("has a repetition {m,n} with n below m");
      q = "{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "}";
    } else {
      return a;
    }
    if (at('?')) ++pos_;  // lazy: the same strings match the whole text
    if (pos_ < cps_.size() && (at('*') || at('+') || at('?') || at('{'))) bad("repeats a repetition");
    return "(" + a + ")" + q;
  }

  std::string atom(int depth) {
    const uint32_t c = cps_[pos_++];
    switch (c) {
      case '(': {
        if (at('?')) {
          if (pos_ + 1 < cps_.size() && cps_[pos_ + 1] == ':') {
            pos_ += 2;
          } else if (pos_ + 1 < cps_.size() && cps_[pos_ + 1] == '<' && pos_ + 2 < cps_.size() && cps_[pos_ + 2] != '=' &&
                     cps_[pos_ + 2] != '!') {
            while (pos_ < cps_.size() && cps_[pos_] != '>') ++pos_;  // a named group: its name is nothing here
            if (pos_ >= cps_.size()) bad("has an unterminated group name");
            ++pos_;
          } else {
            bad("uses lookaround or another (? group, which a grammar cannot follow");
          }
        }
        std::string inner = alternation(depth + 1);
        if (!at(')')) bad("has an unterminated group");
        ++pos_;
        return "(" + inner + ")";
      }
      case '[': return set(class_ranges());
      case '.': return set(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
      case '\\': return escape_atom(false).first;
      case '^': bad("has '^' inside (only at its start)");
      case '$': bad("has '$' inside (only at its end)");
      case '*': case '+': case '?': bad("repeats nothing");
      case ')': bad("has an unmatched ')'");
      default: return set({{c, c}});
    }
  }

  // After a backslash: (the atom, its ranges when it is one character class).
  std::pair<std::string, std::vector<Range>> escape_atom(bool in_class) {
    if (pos_ >= cps_.size()) bad("ends with a lone '\\'");
    const uint32_t e = cps_[pos_++];
    const auto one = [&](std::vector<Range> r) { return std::make_pair(in_class ? std::string() : set(r), r); };
    switch (e) {
      case 'd': return one(kDigit);
      case 'D': return one(complement(kDigit));
      case 'w': return one(kWord);
      case 'W': return one(complement(kWord));
      case 's': return one(kSpace);
      case 'S': return one(complement(kSpace));
      case 'n': return one({{'\n', '\n'}});
      case 't': return one({{'\t', '\t'}});
      case 'r': return one({{'\r', '\r'}});
      case 'f': return one({{'\f', '\f'}});
      case 'v': return one({{'\v', '\v'}});
      case '0': return one({{0, 0}});
      case 'b':
        if (in_class) return one({{'\b', '\b'}});
        bad("uses \\b (a word boundary), which a grammar cannot follow");
      case 'x': case 'u': {
        const int digits = e == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
          const uint32_t h = pos_ < cps_.size() ? cps_[pos_] : 0;
          const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (d < 0) bad(std::string("has \\") + static_cast<char>(e) + " without " + std::to_string(digits) + " hex digits");
          v = v * 16 + static_cast<uint32_t>(d);
          ++pos_;
        }
        return one({{v, v}});
      }
      default:
        if ((e >= '1' && e <= '9') || e == 'k') bad("uses a back-reference, which a grammar cannot follow");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) bad(std::string("uses the unknown escape \\") + static_cast<char>(e));
        return one({{e, e}});  // escaped punctuation
    }
  }

  // [...] after the '[': its ranges (negation applied).
  std::vector<Range> class_ranges() {
    bool negate = false;
    if (at('^')) {
      negate = true;
      ++pos_;
    }
    std::vector<Range> ranges;
    bool first = true;
    while (true) {
      if (pos_ >= cps_.size()) bad("has an unterminated class '['");
      if (at(']') && !first) {
        ++pos_;
        break;
      }
      first = false;
      std::vector<Range> lo_set;
      if (at('\\')) {
        ++pos_;
        lo_set = escape_atom(true).second;
      } else {
        lo_set = {{cps_[pos_], cps_[pos_]}};
        ++pos_;
      }
      if (lo_set.size() == 1 && lo_set[0].first == lo_set[0].second && at('-') && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != ']') {
        ++pos_;
        std::vector<Range> hi_set;
        if (at('\\')) {
          ++pos_;
          hi_set = escape_atom(true).second;
        } else {
          hi_set = {{cps_[pos_], cps_[pos_]}};
          ++pos_;
        }
        if (hi_set.size() != 1 || hi_set[0].first != hi_set[0].second || hi_set[0].first < lo_set[0].first) {
          bad("has a class range out of order");
        }
        ranges.emplace_back(lo_set[0].first, hi_set[0].first);
      } else {
        ranges.insert(ranges.end(), lo_set.begin(), lo_set.end());
      }
    }
    return negate ? complement(ranges) : normalized(ranges);
  }

  // One character from `ranges`, as the text writes it.
  std::string set(const std::vector<Range>& ranges) {
    std::vector<Range> r = minus(normalized(ranges), code_ranges::kSurrogates);
    if (r.empty()) bad("has a class that matches nothing");
    if (mode_ == RegexText::raw) return gbnf_class(r);
    // Inside a JSON string: '"', '\' and control characters only escaped, the rest as they are.
    const std::vector<Range> special = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    std::vector<std::string> alts;
    const std::vector<Range> plain = minus(r, special);
    if (!plain.empty()) alts.push_back(gbnf_class(plain));
    for (const Range& x : minus(r, complement(special))) {
      for (uint32_t c = x.first; c <= x.second; ++c) {
        switch (c) {
          case '"': alts.push_back(R"("\\\"")"); break;
          case '\\': alts.push_back(R"("\\\\")"); break;
          case '\n': alts.push_back(R"("\\n")"); break;
          case '\t': alts.push_back(R"("\\t")"); break;
          case '\r': alts.push_back(R"("\\r")"); break;
          case '\b': alts.push_back(R"("\\b")"); break;
          case '\f': alts.push_back(R"("\\f")"); break;
          default: {
            char buf[16];
            std::snprintf(buf, sizeof buf, R"("\\u%04x")", c);
            alts.push_back(buf);
          }
        }
      }
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }

  std::string_view text_;
  RegexText mode_;
  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
};

}  // namespace

std::string regex_gbnf(std::string_view pattern, RegexText mode) {
  std::string body = RegexCompiler(pattern, mode).compile();
  // A repetition of a part that can match nothing ((a*)*, (a|)+) is a loop the grammar refuses as
  // left recursion: said here of the pattern, where the client wrote it.
  try {
    Grammar::parse("root ::= " + body + "\n");
  } catch (const Error& e) {
    if (std::string_view(e.what()).find("left-recursive") == std::string_view::npos) throw;
    fail("pattern '", pattern, "' repeats a part that can match nothing (as in (a*)* or (a|)+): write the repeated "
         "part so that it takes at least one character");
  }
  return body;
}

}  // namespace kiln
