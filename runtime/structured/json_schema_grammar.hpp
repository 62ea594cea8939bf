// Structured output's requests as GBNF (grammar.hpp): a JSON schema, any JSON object, or one of a
// list of strings. The JSON rules are those of llama.cpp's json-schema-to-grammar: compact JSON with
// a bounded run of whitespace after each token (so a model cannot loop in whitespace forever),
// object properties in the schema's order, numbers of at most 16 integral and 16 fractional
// digits and a two-digit exponent (every one a finite double).
//
// Supported schema keywords: type (one or a list), properties, required, additionalProperties,
// items, prefixItems, minItems, maxItems, minLength, maxLength, pattern (regex_grammar.hpp's
// subset), format (date, time, date-time, uuid, as llama.cpp writes them), an integer's or a
// number's minimum, maximum and exclusive bounds (exact decimals: number_range.hpp), enum, const,
// anyOf, oneOf (as anyOf), allOf of one schema, $ref into #/$defs or #/definitions (recursion
// allowed), and the annotations (title, description, default, examples, ...), which change
// nothing. Any other keyword (multipleOf, other formats, uniqueItems, ...) is refused with an error
// naming it and where it is: ignored, it would let through text the client's validator rejects.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kiln {

// Throws kiln::Error "<path>: ..." (a JSON pointer into the schema) for what it cannot compile.
// Ordered: an object's properties come in the order the schema lists them (a field the model
// should write first, such as its reasoning, stays first).
// compact: no whitespace between tokens at all (vLLM's disable_any_whitespace).
std::string json_schema_gbnf(const nlohmann::ordered_json& schema, bool compact = false);
// Any JSON object (response_format {"type": "json_object"}).
std::string json_object_gbnf(bool compact = false);
// Exactly one of the strings (vLLM's guided_choice). Throws kiln::Error for an empty list.
std::string choice_gbnf(const std::vector<std::string>& choices);
// `text` as a GBNF literal, quotes included.
std::string gbnf_literal(const std::string& text);

}  // namespace kiln
