#include "runtime/core/strict_json.hpp"

#include <cmath>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/file_io.hpp"

namespace kiln {
namespace {

using json = nlohmann::json;

// Builds the document from nlohmann's SAX events, checking each object's keys and the depth as it
// goes: a duplicate or a level too deep stops the parse where it is found. Json: nlohmann::json, or
// ordered_json where the keys' order matters.
template <typename Json>
class StrictBuilder final : public nlohmann::json_sax<Json> {
  using json = Json;
  using number_integer_t = typename json::number_integer_t;
  using number_unsigned_t = typename json::number_unsigned_t;
  using number_float_t = typename json::number_float_t;
  using string_t = typename json::string_t;
  using binary_t = typename json::binary_t;

 public:
  StrictBuilder(const std::string& origin, int max_depth) : origin_(origin), max_depth_(max_depth) {}

  json take() { return std::move(root_); }

  bool null() override { return add(json(nullptr)); }
  bool boolean(bool value) override { return add(json(value)); }
  bool number_integer(number_integer_t value) override { return add(json(value)); }
  bool number_unsigned(number_unsigned_t value) override { return add(json(value)); }
  bool number_float(number_float_t value, const string_t&) override { return add(json(value)); }
  bool string(string_t& value) override { return add(json(std::move(value))); }
  bool binary(binary_t&) override { fail(origin_, ": not valid JSON (binary values are not JSON)"); }
  bool start_object(std::size_t) override { return open(json::object()); }
  bool key(string_t& key) override {
    if (open_.back()->contains(key)) fail(origin_, ": duplicate JSON key \"", key, "\"");
    key_ = std::move(key);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    fail(origin_, ": not valid JSON (", e.what(), ")");
  }

 private:
  // Places `value` in the open container (or as the root) and returns where it went.
  json* place(json&& value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    return &(parent[key_] = std::move(value));
  }
  bool add(json&& value) {
    place(std::move(value));
    return true;
  }
  bool open(json&& container) {
    if (static_cast<int>(open_.size()) >= max_depth_) {
      fail(origin_, ": JSON nested deeper than ", max_depth_, " levels of arrays and objects");
    }
    open_.push_back(place(std::move(container)));
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  const std::string& origin_;
  int max_depth_;
  json root_;
  std::vector<json*> open_;  // the containers being filled, outermost first
  std::string key_;          // the key of the next value in the innermost object
};

template <typename Json>
Json parse_strict(std::string_view text, const std::string& origin, int max_depth) {
  StrictBuilder<Json> builder(origin, max_depth);
  try {
    Json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const nlohmann::json::exception& e) {
    fail(origin, ": not valid JSON (", e.what(), ")");
  }
  return builder.take();
}

}  // namespace

json parse_json_strict(std::string_view text, const std::string& origin, int max_depth) {
  return parse_strict<json>(text, origin, max_depth);
}

nlohmann::ordered_json parse_ordered_json_strict(std::string_view text, const std::string& origin, int max_depth) {
  return parse_strict<nlohmann::ordered_json>(text, origin, max_depth);
}

json read_json_file(const std::string& path, int max_depth) { return parse_json_strict(read_file(path), path, max_depth); }

std::optional<int64_t> json_integer(const json& value, int64_t min, int64_t max) {
  int64_t v = 0;
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    v = static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    v = value.get<int64_t>();
  } else {
    return std::nullopt;
  }
  if (v < min || v > max) return std::nullopt;
  return v;
}

std::optional<uint64_t> json_unsigned(const json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) return static_cast<uint64_t>(value.get<int64_t>());
  return std::nullopt;
}

std::optional<double> json_number(const json& value) {
  if (!value.is_number()) return std::nullopt;
  const double v = value.get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

std::string json_excerpt(const json& value, size_t max_chars) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > max_chars) {
    size_t cut = max_chars;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
    text = text.substr(0, cut) + "...";
  }
  return text;
}

}  // namespace kiln
