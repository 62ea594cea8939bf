// Strict, typed reading of one mapping in a config file (kiln YAML or HF config.json). Free of
// yaml-cpp, so the runtime can read a model directory's config.json with the same code.
// Every error names the file, the line when known, the dotted field path and what was expected:
//   configs/tiny-llama.yaml:7: field 'model.hidden_size': expected a positive integer, got "abc"
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/strict_json.hpp"

namespace kiln::codegen {

// Adapters give each file format (JSON here, YAML in config_yaml_adapter.hpp) one vocabulary,
// so the reader below and the architecture readers (config_arch.hpp) serve both.
struct JsonAdapter {
  using Node = nlohmann::json;
  static bool is_map(const Node& n) { return n.is_object(); }
  static bool is_null(const Node& n) { return n.is_null(); }
  static bool is_list(const Node& n) { return n.is_array(); }
  static std::vector<Node> items(const Node& n) { return {n.begin(), n.end()}; }
  static std::vector<std::string> keys(const Node& n) {
    std::vector<std::string> out;
    for (auto it = n.begin(); it != n.end(); ++it) out.push_back(it.key());
    return out;
  }
  static Node child(const Node& n, const std::string& key) {
    auto it = n.find(key);
    return it == n.end() ? Node() : *it;
  }
  static int line(const Node&) { return 0; }
  static std::string text(const Node& n) { return n.dump(); }
  static std::optional<int64_t> as_int(const Node& n) {
    if (n.is_number_integer()) return json_integer(n);  // nullopt beyond int64, never wrapped
    // HF configs sometimes write integral floats ("factor": 8.0 where an int is meant).
    if (n.is_number_float()) {
      const double d = n.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
    }
    return std::nullopt;
  }
  static std::optional<double> as_double(const Node& n) {
    return n.is_number() ? std::optional(n.get<double>()) : std::nullopt;
  }
  static std::optional<bool> as_bool(const Node& n) {
    return n.is_boolean() ? std::optional(n.get<bool>()) : std::nullopt;
  }
  static std::optional<std::string> as_string(const Node& n) {
    return n.is_string() ? std::optional(n.get<std::string>()) : std::nullopt;
  }
};

template <typename Adapter>
class Fields {
 public:
  using Node = typename Adapter::Node;

  // `path` is the dotted path of this mapping ("" for the document root).
  Fields(Node node, std::string file, std::string path)
      : node_(std::move(node)), file_(std::move(file)), path_(std::move(path)) {
    if (!Adapter::is_map(node_)) {
      fail(where(node_), (path_.empty() ? std::string("the document") : "field '" + path_ + "'"),
           ": expected a mapping of fields");
    }
  }

  bool has(const std::string& key) const {
    seen_.insert(key);
    return !Adapter::is_null(Adapter::child(node_, key));
  }
  bool present(const std::string& key) const {  // present even when null
    for (const auto& k : Adapter::keys(node_)) {
      if (k == key) return true;
    }
    return false;
  }

  int64_t integer(const std::string& key, int64_t min_value = std::numeric_limits<int64_t>::min()) const {
    const Node n = required(key);
    auto v = Adapter::as_int(n);
    if (!v) wrong(key, n, min_value == 1 ? "a positive integer" : "an integer");
    if (*v < min_value) {
      wrong(key, n, min_value == 1 ? "a positive integer" : "an integer >= " + std::to_string(min_value));
    }
    return *v;
  }
  int64_t integer_or(const std::string& key, int64_t fallback, int64_t min_value = std::numeric_limits<int64_t>::min()) const {
    return has(key) ? integer(key, min_value) : fallback;
  }

  double number(const std::string& key) const {
    const Node n = required(key);
    auto v = Adapter::as_double(n);
    if (!v || !std::isfinite(*v)) wrong(key, n, "a finite number");
    return *v;
  }
  double positive_number(const std::string& key) const {
    const double v = number(key);
    if (!(v > 0)) wrong(key, Adapter::child(node_, key), "a positive number");
    return v;
  }
  double number_or(const std::string& key, double fallback) const { return has(key) ? number(key) : fallback; }

  bool boolean(const std::string& key) const {
    const Node n = required(key);
    auto v = Adapter::as_bool(n);
    if (!v) wrong(key, n, "true or false");
    return *v;
  }
  bool boolean_or(const std::string& key, bool fallback) const { return has(key) ? boolean(key) : fallback; }

  std::string string(const std::string& key) const {
    const Node n = required(key);
    auto v = Adapter::as_string(n);
    if (!v) wrong(key, n, "a string");
    return *v;
  }
  std::string string_or(const std::string& key, const std::string& fallback) const {
    return has(key) ? string(key) : fallback;
  }
  // One of `choices`; the error lists them.
  std::string choice(const std::string& key, const std::vector<std::string>& choices) const {
    const std::string v = string(key);
    for (const auto& c : choices) {
      if (c == v) return v;
    }
    wrong(key, Adapter::child(node_, key), "one of " + join(choices));
  }

  // An integer or a list of integers (HF's eos_token_id is either).
  std::vector<int64_t> integer_list(const std::string& key, int64_t min_value) const {
    const Node n = required(key);
    std::vector<int64_t> out;
    if (Adapter::is_list(n)) {
      for (const Node& item : Adapter::items(n)) {
        auto v = Adapter::as_int(item);
        if (!v || *v < min_value) wrong(key, n, "an integer or a list of integers >= " + std::to_string(min_value));
        out.push_back(*v);
      }
      if (out.empty()) wrong(key, n, "a non-empty list");
    } else {
      out.push_back(integer(key, min_value));
    }
    return out;
  }
  std::vector<std::string> string_list(const std::string& key) const {
    const Node n = required(key);
    if (!Adapter::is_list(n)) wrong(key, n, "a list of strings");
    std::vector<std::string> out;
    for (const Node& item : Adapter::items(n)) {
      auto v = Adapter::as_string(item);
      if (!v) wrong(key, n, "a list of strings");
      out.push_back(*v);
    }
    return out;
  }

  Fields section(const std::string& key) const { return Fields(required(key), file_, dotted(key)); }

  // kiln YAML is strict: any key nobody asked about is a mistake (a typo, or an option we lack).
  void reject_unknown() const {
    for (const auto& k : Adapter::keys(node_)) {
      if (!seen_.count(k)) {
        std::vector<std::string> known(seen_.begin(), seen_.end());
        fail(where(Adapter::child(node_, k)), "unknown field '", dotted(k), "'; fields allowed here: ", join(known));
      }
    }
  }
  // HF configs carry many fields kiln does not need; report those nobody asked about.
  std::vector<std::string> unread_keys() const {
    std::vector<std::string> out;
    for (const auto& k : Adapter::keys(node_)) {
      if (!seen_.count(k)) out.push_back(k);
    }
    return out;
  }
  void mark_read(const std::string& key) const { seen_.insert(key); }

  [[noreturn]] void error(const std::string& key, const std::string& message) const {
    fail(where(Adapter::child(node_, key)), "field '", dotted(key), "': ", message);
  }
  const std::string& file() const { return file_; }

 private:
  Node required(const std::string& key) const {
    seen_.insert(key);
    Node n = Adapter::child(node_, key);
    if (Adapter::is_null(n)) fail(where(node_), "missing field '", dotted(key), "'");
    return n;
  }
  [[noreturn]] void wrong(const std::string& key, const Node& n, const std::string& expected) const {
    fail(where(n), "field '", dotted(key), "': expected ", expected, ", got ", Adapter::text(n));
  }
  std::string where(const Node& n) const {
    const int line = Adapter::line(n);
    return line > 0 ? file_ + ":" + std::to_string(line) + ": " : file_ + ": ";
  }
  std::string dotted(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  static std::string join(const std::vector<std::string>& items) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
    return out;
  }

  Node node_;
  std::string file_;
  std::string path_;
  mutable std::set<std::string> seen_;
};

using JsonFields = Fields<JsonAdapter>;

}  // namespace kiln::codegen
