#include "runtime/server/pythonic_calls.hpp"

#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/core/strict_json.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace kiln {
namespace {

using ojson = nlohmann::ordered_json;

struct NotCalls {};  // the text is not a call list: thrown to the top, where it becomes text

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A recursive-descent reader of the call list's Python subset.
class Reader {
 public:
  explicit Reader(std::string_view text) : s_(text) {}

  std::vector<ToolCall> calls() {
    expect('[');
    std::vector<ToolCall> out;
    while (true) {
      skip_space();
      if (peek() == ']' && !out.empty()) break;  // a trailing comma
      out.push_back(call());
      skip_space();
      if (peek() == ',') {
        ++at_;
        continue;
      }
      break;
    }
    expect(']');
    skip_space();
    if (at_ != s_.size()) throw NotCalls{};
    return out;
  }

 private:
  char peek() const { return at_ < s_.size() ? s_[at_] : '\0'; }
  void skip_space() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\t' || s_[at_] == '\n' || s_[at_] == '\r')) ++at_;
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) throw NotCalls{};
    ++at_;
  }
  std::string_view name() {
    skip_space();
    if (!is_name_start(peek())) throw NotCalls{};
    const size_t begin = at_;
    while (at_ < s_.size() && is_name_char(s_[at_])) ++at_;
    return s_.substr(begin, at_ - begin);
  }

  // name(keyword=literal, ...)
  ToolCall call() {
    ToolCall c;
    c.name = std::string(name());
    expect('(');
    ojson arguments = ojson::object();
    while (true) {
      skip_space();
      if (peek() == ')') break;
      const std::string key(name());
      expect('=');
      if (arguments.contains(key)) throw NotCalls{};  // Python: a repeated keyword argument
      arguments[key] = value(1);
      skip_space();
      if (peek() != ',') break;
      ++at_;
    }
    expect(')');
    try {
      c.arguments = arguments.dump();
    } catch (const nlohmann::json::exception&) {
      throw NotCalls{};  // a string that is not UTF-8
    }
    return c;
  }

  ojson value(int depth) {
    if (depth > kJsonMaxDepth) throw NotCalls{};
    skip_space();
    const char c = peek();
    if (c == '"' || c == '\'') return string();
    if (c == '[' || c == '(') return sequence(c == '[' ? ']' : ')', depth);
    if (c == '{') return dict(depth);
    if (c == '-' || c == '+' || c == '.' || is_digit(c)) return number();
    const std::string_view word = name();
    if (word == "True") return true;
    if (word == "False") return false;
    if (word == "None") return nullptr;
    throw NotCalls{};  // a variable, a call: not a literal
  }

  // [a, b], (a, b) as a JSON array; (a) is just a.
  ojson sequence(char close, int depth) {
    ++at_;
    ojson out = ojson::array();
    bool comma = false;
    while (true) {
      skip_space();
      if (peek() == close) break;
      out.push_back(value(depth + 1));
      skip_space();
      if (peek() != ',') break;
      ++at_;
      comma = true;
    }
    expect(close);
    if (close == ')' && out.size() == 1 && !comma) return out[0];
    return out;
  }

  // {key: value, ...}: keys as json.dumps writes them (strings; ints, True, False, None as text).
  ojson dict(int depth) {
    ++at_;
    ojson out = ojson::object();
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const ojson key = value(depth + 1);
      std::string text;
      if (key.is_string()) {
        text = key.get<std::string>();
      } else if (key.is_number_integer() || key.is_boolean() || key.is_null()) {
        text = key.dump();
      } else {
        throw NotCalls{};  // a float, list or dict key
      }
      expect(':');
      out[text] = value(depth + 1);
      skip_space();
      if (peek() != ',') break;
      ++at_;
    }
    expect('}');
    return out;
  }

  // Python's decimal integers and floats (underscores between digits), with a sign.
  ojson number() {
    bool negative = false;
    while (peek() == '-' || peek() == '+') {
      negative = negative != (peek() == '-');
      ++at_;
      skip_space();
    }
    std::string digits;
    bool is_float = false, last_digit = false;
    const size_t begin = at_;
    for (; at_ < s_.size(); ++at_) {
      const char c = s_[at_];
      if (is_digit(c)) {
        digits += c;
        last_digit = true;
      } else if (c == '_' && last_digit && at_ + 1 < s_.size() && is_digit(s_[at_ + 1])) {
        last_digit = false;
      } else if (c == '.' || c == 'e' || c == 'E') {
        is_float = true;
        digits += c;
        last_digit = false;
        if ((c == 'e' || c == 'E') && at_ + 1 < s_.size() && (s_[at_ + 1] == '+' || s_[at_ + 1] == '-')) digits += s_[++at_];
      } else {
        break;
      }
    }
    if (at_ == begin || is_name_char(peek())) throw NotCalls{};  // 0x1F, 1j, 2abc
    if (negative) digits.insert(digits.begin(), '-');
    errno = 0;
    char* end = nullptr;
    if (is_float) {
      const double v = std::strtod(digits.c_str(), &end);
      // "1.2.3", ".e5", "1e", and overflow (Python's inf: not JSON)
      if (end != digits.c_str() + digits.size() || errno == ERANGE) throw NotCalls{};
      return v;
    }
    const std::string_view magnitude = std::string_view(digits).substr(negative ? 1 : 0);
    if (magnitude.size() > 1 && magnitude[0] == '0' && magnitude.find_first_not_of('0') != std::string_view::npos) {
      throw NotCalls{};  // 012: not Python 3
    }
    const long long v = std::strtoll(digits.c_str(), &end, 10);
    if (errno == ERANGE || end != digits.c_str() + digits.size()) throw NotCalls{};  // past 64 bits
    return v;
  }

  uint32_t hex(size_t count) {
    if (at_ + count > s_.size()) throw NotCalls{};
    uint32_t v = 0;
    for (size_t k = 0; k < count; ++k) {
      const char c = s_[at_++];
      const int d = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) throw NotCalls{};
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  // '...', "...", '''...''', """...""" with Python's escapes.
  ojson string() {
    const char quote = s_[at_];
    const std::string triple_quote(3, quote);
    const bool triple = s_.substr(at_, 3) == triple_quote;
    at_ += triple ? 3 : 1;
    std::string out;
    while (true) {
      if (at_ >= s_.size()) throw NotCalls{};
      const char c = s_[at_];
      if (c == quote && (!triple || s_.substr(at_, 3) == triple_quote)) {
        at_ += triple ? 3 : 1;
        return out;
      }
      if ((c == '\n' || c == '\r') && !triple) throw NotCalls{};
      ++at_;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= s_.size()) throw NotCalls{};
      const char e = s_[at_++];
      switch (e) {
        case '\n': break;  // a line continuation
        case '\\': case '\'': case '"': out += e; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case 'x': append_code_point(out, hex(2)); break;
        case 'u': append_code_point(out, hex(4)); break;
        case 'U': append_code_point(out, hex(8)); break;
        default:
          if (e >= '0' && e <= '7') {  // octal, up to three digits
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '7'; ++k) v = v * 8 + (s_[at_++] - '0');
            append_code_point(out, v);
          } else if (e == 'N') {
            throw NotCalls{};  // \N{NAME}: the names are not kept here
          } else {
            out += '\\';  // Python keeps an unknown escape as it is
            out += e;
          }
      }
    }
  }

  static void append_code_point(std::string& out, uint32_t cp) {
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) throw NotCalls{};  // not encodable in UTF-8
    utf8::append(out, static_cast<char32_t>(cp));
  }

  std::string_view s_;
  size_t at_ = 0;
};

}  // namespace

std::optional<std::vector<ToolCall>> parse_pythonic_calls(std::string_view text) {
  try {
    return Reader(text).calls();
  } catch (const NotCalls&) {
    return std::nullopt;
  }
}

}  // namespace kiln
