// JSON reading for everything kiln reads that someone else wrote: weight headers, model and
// tokenizer configs, JSONL requests. nlohmann parses; this layer also refuses what nlohmann accepts
// silently:
//   - duplicate object keys (nlohmann keeps the last one): in a weight header they would hide a
//     tensor, in a config a second value nobody sees;
//   - nesting deeper than a limit: every loader walks nested structures recursively, so a file
//     200,000 levels deep must never reach them (nor nlohmann's recursive copy and dump);
//   - numbers outside double's range (nlohmann throws a non-parse exception for 1e400).
// The typed reads below never narrow: 4294967297 is not token 1, and 2.0 is not an integer.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kiln {

// Arrays and objects nested inside each other at most this deep. Real files stay under 10
// (tokenizer.json's normalizer sequences are the deepest).
inline constexpr int kJsonMaxDepth = 64;

// Parses `text`; throws kiln::Error naming `origin` on a syntax error, a duplicate key, a number
// out of range or nesting deeper than `max_depth`.
nlohmann::json parse_json_strict(std::string_view text, const std::string& origin, int max_depth = kJsonMaxDepth);
// The same, keeping each object's keys in the text's order (a JSON schema's properties).
nlohmann::ordered_json parse_ordered_json_strict(std::string_view text, const std::string& origin,
                                                 int max_depth = kJsonMaxDepth);

// read_file(path) (a regular file, size-limited) parsed with parse_json_strict.
nlohmann::json read_json_file(const std::string& path, int max_depth = kJsonMaxDepth);

// `value` as an integer in [min, max]; nullopt for anything else (floats such as 2.0 included).
std::optional<int64_t> json_integer(const nlohmann::json& value, int64_t min = std::numeric_limits<int64_t>::min(),
                                    int64_t max = std::numeric_limits<int64_t>::max());
// `value` as an unsigned 64-bit integer (seeds); nullopt for negatives and floats.
std::optional<uint64_t> json_unsigned(const nlohmann::json& value);
// `value` as a finite number (integers too); nullopt for anything else.
std::optional<double> json_number(const nlohmann::json& value);

// `value` as it appears in a message: compact JSON, cut at `max_chars` ("..." appended), so an
// error about a huge value stays one readable line.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 80);

}  // namespace kiln
