#include "runtime/structured/number_range.hpp"

#include <algorithm>
#include <vector>

namespace kiln {
namespace {

constexpr size_t kMaxDigits = 16;  // integral and fractional digits, as the schema's number rule

// The digit strings from a to b (the same length, a <= b), as GBNF: a's first digit then the rest of
// a up to 9s, the digits between whole, b's first digit then 0s up to the rest of b.
std::string digit_range(const std::string& a, const std::string& b) {
  if (a == b) return "\"" + a + "\"";
  if (a.size() == 1) return std::string("[") + a[0] + "-" + b[0] + "]";
  const std::string first_a = "\"" + a.substr(0, 1) + "\"", first_b = "\"" + b.substr(0, 1) + "\"";
  if (a[0] == b[0]) return first_a + " " + digit_range(a.substr(1), b.substr(1));
  const size_t n = a.size() - 1;
  std::string out = "(" + first_a + " " + digit_range(a.substr(1), std::string(n, '9'));
  if (b[0] - a[0] >= 2) {
    out += std::string(" | [") + static_cast<char>(a[0] + 1) + "-" + static_cast<char>(b[0] - 1) + "] [0-9]{" +
           std::to_string(n) + "}";
  }
  return out + " | " + first_b + " " + digit_range(std::string(n, '0'), b.substr(1)) + ")";
}

std::string join(const std::vector<std::string>& alts) {
  std::string out;
  for (const std::string& a : alts) out += (out.empty() ? "" : " | ") + a;
  return alts.size() == 1 ? out : "(" + out + ")";
}

std::string digit_class(int from, int to) {
  if (from == to) return "\"" + std::string(1, static_cast<char>('0' + from)) + "\"";
  return std::string("[") + static_cast<char>('0' + from) + "-" + static_cast<char>('0' + to) + "]";
}

// Fractional digits compared with the bounds' fractional digits, digit by digit (a bound's digits
// past its end are 0). A bound is "tight" while the digits so far equal its own: the next digit may
// not go below the lower one's (above the upper one's); once it does not equal, that bound holds
// whatever follows.
struct Fraction {
  const std::string* lo = nullptr;  // the lower bound's fraction; null: no lower bound here
  bool lo_exclusive = false;
  const std::string* hi = nullptr;
  bool hi_exclusive = false;

  static int digit(const std::string& f, size_t i) { return i < f.size() ? f[i] - '0' : 0; }

  // Whether the digits may stop at position i with the bounds tight as given.
  bool may_stop(size_t i, bool tight_lo, bool tight_hi) const {
    // Equal so far: the rest of the value is 0s. Below the lower bound while its digits remain,
    // equal once they are done; the upper bound is above while its digits remain.
    if (tight_lo && (i < lo->size() || lo_exclusive)) return false;
    if (tight_hi && i >= hi->size() && hi_exclusive) return false;
    return true;
  }

  // The digit strings from position i on (with at least one digit when `need_digit`), at most
  // kMaxDigits in all; nullopt when none fits.
  std::optional<std::string> from(size_t i, bool tight_lo, bool tight_hi, bool need_digit) const {
    const bool stop = !need_digit && may_stop(i, tight_lo, tight_hi);
    if (i == kMaxDigits) return stop ? std::optional<std::string>("\"\"") : std::nullopt;
    const std::string count = "{" + std::to_string(need_digit ? 1 : 0) + "," + std::to_string(kMaxDigits - i) + "}";
    // Past an inclusive lower bound's digits, equal so far: whatever follows is at least it.
    if (tight_lo && i >= lo->size() && !lo_exclusive) tight_lo = false;
    // Past the upper bound's digits, equal so far: only 0s stay at or below it, and none below.
    if (tight_hi && i >= hi->size()) {
      if (hi_exclusive || tight_lo) return std::nullopt;
      return stop ? std::optional<std::string>("\"0\"" + count) : "\"0\"" + count;
    }
    if (!tight_lo && !tight_hi) return "[0-9]" + count;
    const int low = tight_lo ? digit(*lo, i) : 0, high = tight_hi ? digit(*hi, i) : 9;
    std::vector<std::string> alts;
    if (stop) alts.push_back("\"\"");
    const auto then = [&](int from_digit, int to_digit, bool lo_next, bool hi_next) {
      if (from_digit > to_digit) return;
      if (const std::optional<std::string> rest = this->from(i + 1, lo_next, hi_next, false)) {
        alts.push_back(digit_class(from_digit, to_digit) + (*rest == "\"\"" ? "" : " " + *rest));
      }
    };
    if (low == high && tight_lo && tight_hi) {
      then(low, low, true, true);
    } else {
      if (tight_lo) then(low, low, true, false);
      then(low + (tight_lo ? 1 : 0), high - (tight_hi ? 1 : 0), false, false);
      if (tight_hi) then(high, high, false, true);
    }
    if (alts.empty()) return std::nullopt;
    return join(alts);
  }

  // Nothing, or "." and digits, as the bounds allow.
  std::optional<std::string> part() const {
    std::vector<std::string> alts;
    if (may_stop(0, lo != nullptr, hi != nullptr)) alts.push_back("\"\"");
    if (const std::optional<std::string> digits = from(0, lo != nullptr, hi != nullptr, true)) {
      alts.push_back("\".\" " + *digits);
    }
    if (alts.empty()) return std::nullopt;
    return join(alts);
  }
};

// Non-negative decimals in [lo, hi] (hi absent: no upper bound), as GBNF alternatives, by the
// integral part: lo's own, those strictly between (any fraction), hi's own.
std::vector<std::string> magnitudes(const DecimalBound& lo, const std::optional<DecimalBound>& hi) {
  const int64_t a = std::stoll(lo.value.integral);
  const int64_t b = hi ? std::stoll(hi->value.integral) : -1;
  std::vector<std::string> out;
  const auto add = [&](const std::string& integral, const Fraction& f) {
    if (const std::optional<std::string> frac = f.part()) out.push_back(integral + (*frac == "\"\"" ? "" : " " + *frac));
  };
  Fraction at_lo{&lo.value.fraction, lo.exclusive};
  if (hi && b == a) {
    at_lo.hi = &hi->value.fraction;
    at_lo.hi_exclusive = hi->exclusive;
  }
  add("\"" + lo.value.integral + "\"", at_lo);
  if (!hi || b - a >= 2) add("(" + integer_range_gbnf(a + 1, hi ? b - 1 : -1) + ")", Fraction{});
  if (hi && b > a) add("\"" + hi->value.integral + "\"", Fraction{nullptr, false, &hi->value.fraction, hi->exclusive});
  return out;
}

}  // namespace

std::string integer_range_gbnf(int64_t lo, int64_t hi) {
  const std::string slo = std::to_string(lo), shi = hi >= 0 ? std::to_string(hi) : "";
  std::string out;
  const size_t last = hi >= 0 ? shi.size() : slo.size();
  for (size_t len = slo.size(); len <= last; ++len) {
    std::string a = slo;
    if (len != slo.size()) {  // 10...0
      a.assign(len, '0');
      a[0] = '1';
    }
    const std::string b = hi >= 0 && len == shi.size() ? shi : std::string(len, '9');
    out += (out.empty() ? "" : " | ") + digit_range(a, b);
  }
  if (hi < 0 && slo.size() < kMaxDigits) {  // longer ones
    out += " | [1-9] [0-9]{" + std::to_string(slo.size()) + "," + std::to_string(kMaxDigits - 1) + "}";
  }
  return out;
}

std::optional<Decimal> Decimal::of(const nlohmann::ordered_json& number) {
  if (!number.is_number()) return std::nullopt;
  // The shortest text that reads back as the same double: "0.1", "-2.5e-07", "1e+20", "42".
  const std::string text = number.dump();
  Decimal d;
  size_t at = 0;
  if (text[at] == '-') {
    d.negative = true;
    ++at;
  }
  std::string digits;
  int64_t point = -1;  // digits before the point
  for (; at < text.size() && text[at] != 'e' && text[at] != 'E'; ++at) {
    if (text[at] == '.') {
      point = static_cast<int64_t>(digits.size());
    } else {
      digits += text[at];
    }
  }
  if (point < 0) point = static_cast<int64_t>(digits.size());
  if (at < text.size()) point += std::stoll(text.substr(at + 1));
  // Pad so that the point falls inside the digits.
  if (point <= 0) {
    digits.insert(0, static_cast<size_t>(1 - point), '0');
    point = 1;
  }
  if (point > static_cast<int64_t>(digits.size())) digits.append(static_cast<size_t>(point) - digits.size(), '0');
  d.integral = digits.substr(0, static_cast<size_t>(point));
  d.fraction = digits.substr(static_cast<size_t>(point));
  d.integral.erase(0, std::min(d.integral.find_first_not_of('0'), d.integral.size() - 1));
  d.fraction.erase(d.fraction.find_last_not_of('0') + 1);
  if (d.integral.size() > 15 || d.fraction.size() > kMaxDigits) return std::nullopt;
  if (d.is_zero()) d.negative = false;
  return d;
}

Decimal Decimal::negated() const {
  Decimal d = *this;
  d.negative = !negative && !is_zero();
  return d;
}

int compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  const int sign = a.negative ? -1 : 1;
  if (a.integral.size() != b.integral.size()) return a.integral.size() < b.integral.size() ? -sign : sign;
  if (a.integral != b.integral) return a.integral < b.integral ? -sign : sign;
  const size_t n = std::max(a.fraction.size(), b.fraction.size());
  std::string fa = a.fraction, fb = b.fraction;
  fa.resize(n, '0');
  fb.resize(n, '0');
  if (fa != fb) return fa < fb ? -sign : sign;
  return 0;
}

std::optional<std::string> decimal_range_gbnf(const std::optional<DecimalBound>& lo, const std::optional<DecimalBound>& hi) {
  if (lo && hi) {
    const int c = compare(lo->value, hi->value);
    if (c > 0 || (c == 0 && (lo->exclusive || hi->exclusive))) return std::nullopt;
  }
  const Decimal zero;
  std::vector<std::string> alts;
  // x < 0: "-" and the magnitude -x in [-hi, -lo] (above 0 where hi is not negative).
  if (!lo || lo->value.negative) {
    const DecimalBound m_lo = hi && hi->value.negative ? DecimalBound{hi->value.negated(), hi->exclusive}
                                                       : DecimalBound{zero, true};
    std::optional<DecimalBound> m_hi;
    if (lo) m_hi = DecimalBound{lo->value.negated(), lo->exclusive};
    const std::vector<std::string> m = magnitudes(m_lo, m_hi);
    if (!m.empty()) alts.push_back("\"-\" " + join(m));
  }
  // x >= 0 (> 0 where the lower bound is an exclusive 0), up to hi.
  if (!hi || !hi->value.negative) {
    const DecimalBound p_lo = lo && !lo->value.negative ? *lo : DecimalBound{zero, false};
    if (!(hi && hi->value.is_zero() && hi->exclusive) && !(hi && compare(p_lo.value, hi->value) > 0)) {
      const std::vector<std::string> m = magnitudes(p_lo, hi);
      alts.insert(alts.end(), m.begin(), m.end());
    }
  }
  if (alts.empty()) return std::nullopt;
  return join(alts);
}

}  // namespace kiln
