// The YAML side of config_fields.hpp: yaml-cpp nodes behind the adapter vocabulary of Fields.
// Only kilnc's YAML front end uses it (model binaries never link yaml-cpp).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "codegen/config_fields.hpp"

namespace kiln::codegen {

struct YamlAdapter {
  using Node = YAML::Node;
  static bool is_map(const Node& n) { return n.IsMap(); }
  static bool is_null(const Node& n) { return !n.IsDefined() || n.IsNull(); }
  static bool is_list(const Node& n) { return n.IsSequence(); }
  static std::vector<Node> items(const Node& n) { return {n.begin(), n.end()}; }
  static std::vector<std::string> keys(const Node& n) {
    std::vector<std::string> out;
    for (const auto& kv : n) out.push_back(kv.first.as<std::string>());
    return out;
  }
  static Node child(const Node& n, const std::string& key) { return n[key]; }
  static int line(const Node& n) { return n.Mark().line >= 0 ? n.Mark().line + 1 : 0; }
  static std::string text(const Node& n) { return n.IsScalar() ? n.Scalar() : "(a " + kind(n) + ")"; }
  static std::string kind(const Node& n) {
    return n.IsMap() ? "mapping" : n.IsSequence() ? "list" : n.IsNull() ? "null" : "scalar";
  }
  static std::optional<int64_t> as_int(const Node& n) {
    if (!n.IsScalar()) return std::nullopt;
    int64_t v;
    return YAML::convert<int64_t>::decode(n, v) ? std::optional(v) : std::nullopt;
  }
  static std::optional<double> as_double(const Node& n) {
    if (!n.IsScalar()) return std::nullopt;
    double v;
    return YAML::convert<double>::decode(n, v) ? std::optional(v) : std::nullopt;
  }
  static std::optional<bool> as_bool(const Node& n) {
    if (!n.IsScalar()) return std::nullopt;
    const std::string& s = n.Scalar();  // only the YAML 1.2 core spellings
    if (s == "true") return true;
    if (s == "false") return false;
    return std::nullopt;
  }
  static std::optional<std::string> as_string(const Node& n) {
    if (!n.IsScalar()) return std::nullopt;
    return n.Scalar();
  }
};

using YamlFields = Fields<YamlAdapter>;

}  // namespace kiln::codegen
