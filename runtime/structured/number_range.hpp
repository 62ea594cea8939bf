// JSON schema numeric ranges as GBNF (json_schema_grammar.hpp): the integers between two bounds,
// and the decimals between two bounds (a number's minimum / maximum / exclusive bounds), exactly:
// a bound such as 0.1 is the shortest decimal that reads back as the schema's double (0.1, not
// the double's exact binary value; a bound written with more than the 15-17 digits a double keeps
// is rounded there), and the grammar compares digit by digit. The texts are JSON's own forms as the schema rules write them: no
// leading zeros, at most 16 integral and 16 fractional digits; a bounded number has no exponent
// (each value in range has a plain form) and no "-0".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kiln {

// The integers in [lo, hi] (lo >= 0; hi -1: no bound, up to 16 digits), as a GBNF expression.
std::string integer_range_gbnf(int64_t lo, int64_t hi);

// A number's exact decimal value: sign, integral digits (no leading zeros; "0" for none) and
// fractional digits (no trailing zeros).
struct Decimal {
  bool negative = false;
  std::string integral = "0", fraction;

  // From a JSON number as the schema holds it (its shortest round-trip text, exponent expanded).
  // nullopt for a magnitude of 1e15 or more, or more than 16 fractional digits.
  static std::optional<Decimal> of(const nlohmann::ordered_json& number);
  bool is_zero() const { return integral == "0" && fraction.empty(); }
  Decimal negated() const;
};
int compare(const Decimal& a, const Decimal& b);

struct DecimalBound {
  Decimal value;
  bool exclusive = false;
};

// The decimal numbers x with lo <= x <= hi (< / > where exclusive; either bound may be absent), as
// a GBNF expression; nullopt when no number lies between them.
std::optional<std::string> decimal_range_gbnf(const std::optional<DecimalBound>& lo, const std::optional<DecimalBound>& hi);

}  // namespace kiln
