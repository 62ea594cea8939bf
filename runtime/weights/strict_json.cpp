#include "runtime/weights/strict_json.hpp"

#include <set>
#include <vector>

#include "runtime/core/error.hpp"

namespace kiln {
namespace {

using json = nlohmann::json;

json parse(std::string_view text, const std::string& origin, bool reject_duplicate_keys) {
  // One key set per open object; the parser reports keys before their values.
  std::vector<std::set<std::string>> open_objects;
  const json::parser_callback_t check_keys = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case json::parse_event_t::object_end: open_objects.pop_back(); break;
      case json::parse_event_t::key:
        if (!open_objects.back().insert(parsed.get<std::string>()).second) {
          fail(origin, ": duplicate JSON key \"", parsed.get<std::string>(), "\"");
        }
        break;
      default: break;
    }
    return true;
  };
  try {
    if (!reject_duplicate_keys) return json::parse(text.begin(), text.end());
    return json::parse(text.begin(), text.end(), check_keys);
  } catch (const json::exception& e) {
    fail(origin, ": invalid JSON (", e.what(), ")");
  }
}

}  // namespace

json parse_json_strict(std::string_view text, const std::string& origin) { return parse(text, origin, true); }

json parse_json(std::string_view text, const std::string& origin) { return parse(text, origin, false); }

}  // namespace kiln
