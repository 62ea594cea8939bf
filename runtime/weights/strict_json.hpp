// JSON parsing with errors that name the file. parse_json_strict also rejects what nlohmann
// accepts silently: duplicate object keys (nlohmann keeps the last one), which in a weight file
// header would hide a tensor or a shard assignment.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kiln {

// Parses `text`; throws kiln::Error naming `origin` on a syntax error or a duplicate key.
nlohmann::json parse_json_strict(std::string_view text, const std::string& origin);

// Parses `text`; throws kiln::Error naming `origin` on a syntax error. A repeated key keeps its
// last value, as nlohmann does.
nlohmann::json parse_json(std::string_view text, const std::string& origin);

}  // namespace kiln
