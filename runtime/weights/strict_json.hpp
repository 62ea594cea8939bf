// JSON parsing that rejects what nlohmann accepts silently: duplicate object keys (nlohmann keeps
// the last one), which in a weight file header would hide a tensor or a shard assignment.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kiln {

// Parses `text`; throws kiln::Error naming `origin` on a syntax error or a duplicate key.
nlohmann::json parse_json_strict(std::string_view text, const std::string& origin);

}  // namespace kiln
