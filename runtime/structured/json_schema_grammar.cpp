#include "runtime/structured/json_schema_grammar.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <optional>
#include <map>
#include <set>
#include <utility>

#include "runtime/core/error.hpp"
#include "runtime/structured/number_range.hpp"
#include "runtime/structured/regex_grammar.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace kiln {

using json = nlohmann::ordered_json;

std::string gbnf_literal(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02X", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

namespace {

// Code points of UTF-8 text (the callers' text is valid UTF-8: JSON strings, dumped JSON), and back.
std::vector<uint32_t> code_points(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) out.push_back(static_cast<uint32_t>(utf8::next(s, i)));
  return out;
}
std::string utf8_text(const std::vector<uint32_t>& cps, size_t from, size_t to) {
  std::string out;
  for (size_t i = from; i < to; ++i) utf8::append(out, static_cast<char32_t>(cps[i]));
  return out;
}

// words[lo, hi) (sorted, sharing their first `depth` code points) from there on, as GBNF: the
// branches of a trie, so that a text begins in as many ways as the words have distinct first
// characters, not as many as there are words (the matcher follows at most kMaxStacks at once).
std::string trie_from(const std::vector<std::vector<uint32_t>>& words, size_t lo, size_t hi, size_t depth) {
  bool ends = false;
  while (lo < hi && words[lo].size() == depth) {  // the shorter sort first
    ends = true;
    ++lo;
  }
  std::vector<std::string> alts;
  for (size_t a = lo; a < hi;) {
    size_t b = a;
    while (b < hi && words[b][depth] == words[a][depth]) ++b;
    size_t k = depth + 1;  // the group's common prefix, as far as no word ends or differs
    while (true) {
      bool same = true;
      for (size_t w = a; w < b && same; ++w) same = words[w].size() > k && words[w][k] == words[a][k];
      if (!same) break;
      ++k;
    }
    const std::string rest = trie_from(words, a, b, k);
    alts.push_back(gbnf_literal(utf8_text(words[a], depth, k)) + (rest.empty() ? "" : " " + rest));
    a = b;
  }
  if (alts.empty()) return "";
  std::string out;
  for (const std::string& x : alts) out += (out.empty() ? "" : " | ") + x;
  return "(" + out + (ends ? ")?" : ")");
}

// Exactly one of `words`, as a GBNF expression.
std::string literal_trie(const std::vector<std::string>& words) {
  std::vector<std::vector<uint32_t>> cps;
  for (const std::string& w : words) cps.push_back(code_points(w));
  std::sort(cps.begin(), cps.end());
  cps.erase(std::unique(cps.begin(), cps.end()), cps.end());
  const std::string t = trie_from(cps, 0, cps.size(), 0);
  return t.empty() ? "\"\"" : t;
}

// JSON's own rules; each value's rule ends with `space`.
const std::map<std::string, std::string>& primitives() {
  static const std::map<std::string, std::string> rules = {
      {"space", R"(| " " | "\n" [ \t]{0,20})"},
      {"boolean", R"(("true" | "false") space)"},
      {"null", R"("null" space)"},
      {"integral-part", R"([0] | [1-9] [0-9]{0,15})"},
      {"decimal-part", R"([0-9]{1,16})"},
      {"integer", R"("-"? integral-part space)"},
      {"number", R"("-"? integral-part ("." decimal-part)? ([eE] [-+]? [0-9]{1,2})? space)"},
      {"char", R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))"},
      {"string", R"("\"" char* "\"" space)"},
      {"value", R"(object | array | string | number | boolean | null)"},
      {"object", R"("{" space (string ":" space value ("," space string ":" space value)*)? "}" space)"},
      {"array", R"("[" space (value ("," space value)*)? "]" space)"},
  };
  return rules;
}
// What each primitive uses.
const std::map<std::string, std::vector<std::string>>& primitive_uses() {
  static const std::map<std::string, std::vector<std::string>> uses = {
      {"boolean", {"space"}},
      {"null", {"space"}},
      {"integer", {"integral-part", "space"}},
      {"number", {"integral-part", "decimal-part", "space"}},
      {"string", {"char", "space"}},
      {"value", {"object", "array", "string", "number", "boolean", "null"}},
      {"object", {"string", "value", "space"}},
      {"array", {"value", "space"}},
  };
  return uses;
}

// The types each type-specific keyword applies to.
const std::map<std::string, std::set<std::string>>& type_keywords() {
  static const std::map<std::string, std::set<std::string>> keys = {
      {"minLength", {"string"}}, {"maxLength", {"string"}}, {"pattern", {"string"}}, {"format", {"string"}},
      {"minimum", {"integer", "number"}}, {"maximum", {"integer", "number"}},
      {"exclusiveMinimum", {"integer", "number"}}, {"exclusiveMaximum", {"integer", "number"}},
      {"items", {"array"}}, {"prefixItems", {"array"}}, {"minItems", {"array"}}, {"maxItems", {"array"}},
      {"uniqueItems", {"array"}}, {"properties", {"object"}}, {"required", {"object"}},
      {"additionalProperties", {"object"}},
  };
  return keys;
}

const std::set<std::string>& annotations() {
  static const std::set<std::string> keys = {"title", "description", "default", "examples", "$schema", "$id",
                                             "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                             "definitions", "strict", "discriminator"};
  return keys;
}

// String formats as llama.cpp writes them (inside the quotes).
const std::map<std::string, std::string>& formats() {
  static const std::string date = R"([0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [1-2] [0-9] | "3" [0-1]))";
  static const std::string time =
      R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{3})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))";
  static const std::map<std::string, std::string> f = {
      {"date", "(" + date + ")"},
      {"time", "(" + time + ")"},
      {"date-time", "(" + date + " \"T\" " + time + ")"},
      {"uuid", R"(([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}))"},
  };
  return f;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, bool compact) : root_(root), compact_(compact) {}

  std::string compile() {
    const std::string top = visit(root_, "", "root");
    if (top != "root") rules_.emplace_back("root", top);
    std::string out;
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

  std::string object_only() {
    use("object");
    rules_.emplace_back("root", "object");
    std::string out;
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  [[noreturn]] static void bad(const std::string& path, const std::string& what) {
    fail("json_schema: ", path.empty() ? "/" : path, ": ", what);
  }

  // A primitive rule, with the ones it uses.
  std::string use(const std::string& name) {
    if (used_.insert(name).second) {
      if (auto it = primitive_uses().find(name); it != primitive_uses().end()) {
        for (const std::string& dep : it->second) use(dep);
      }
      rules_.emplace_back(name, compact_ && name == "space" ? "\"\"" : primitives().at(name));
    }
    return name;
  }

  std::string new_rule(const std::string& hint, const std::string& body) {
    const std::string name = fresh_name(hint);
    rules_.emplace_back(name, body);
    return name;
  }
  std::string fresh_name(const std::string& hint) {
    std::string base;
    for (char c : hint) base += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
    if (base.empty()) base = "item";
    if (primitives().count(base) || base == "root" ? false : names_.insert(base).second) return base;
    for (int i = 1;; ++i) {
      const std::string n = base + "-" + std::to_string(i);
      if (!primitives().count(n) && names_.insert(n).second) return n;
    }
  }

  std::string literal_value(const json& v) { return gbnf_literal(v.dump()) + " " + use("space"); }

  static std::string pointer_escape(const std::string& key) {
    std::string out;
    for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    return out;
  }

  int32_t count(const json& s, const char* key, const std::string& path) {
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 4096) {
      bad(path + "/" + key, std::string("'") + key + "' must be an integer in [0, 4096]");
    }
    return static_cast<int32_t>(v.get<int64_t>());
  }

  void check_keys(const json& s, const std::string& path, const std::set<std::string>& allowed) {
    for (const auto& [k, v] : s.items()) {
      if (allowed.count(k) || annotations().count(k)) continue;
      bad(path, "the keyword '" + k + "' is not supported here (structured output supports type, properties, "
                "required, additionalProperties, items, prefixItems, minItems, maxItems, minLength, maxLength, pattern, "
                "format (date, time, date-time, uuid), a number's or integer's minimum and maximum, enum, const, anyOf, oneOf, "
                "allOf of one schema and $ref)");
    }
  }

  std::string resolve_ref(const std::string& ref, const std::string& path) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    const json* target = nullptr;
    std::string hint = "ref";
    if (ref == "#") {
      target = &root_;
      hint = "root-ref";
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p = prefix;
        if (ref.rfind(p, 0) != 0) continue;
        const std::string name = ref.substr(p.size());
        const auto defs = root_.find(p.substr(2, p.size() - 3));  // "$defs" or "definitions"
        if (defs != root_.end() && defs->is_object() && defs->contains(name)) target = &(*defs)[name];
        hint = name;
      }
    }
    if (target == nullptr) {
      bad(path + "/$ref", "'" + ref + "' names no schema (give #, #/$defs/<name> or #/definitions/<name>)");
    }
    const std::string name = fresh_name(hint);
    refs_[ref] = name;  // before the visit: a recursive schema refers to itself by this name
    const std::string body = visit(*target, ref.substr(1), name);
    rules_.emplace_back(name, body);
    return name;
  }

  // An expression matching the values `s` allows, each followed by `space`.
  std::string visit(const json& s, const std::string& path, const std::string& hint) {
    if (++depth_ > 64) bad(path, "the schema nests deeper than 64 levels");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    if (s.is_boolean()) {
      if (!s.get<bool>()) bad(path, "the schema 'false' allows no value");
      return use("value");
    }
    if (!s.is_object()) bad(path, "a schema must be an object or a boolean, not " + std::string(s.type_name()));
    if (s.contains("$ref")) {
      check_keys(s, path, {"$ref"});
      if (!s["$ref"].is_string()) bad(path + "/$ref", "'$ref' must be a string");
      return resolve_ref(s["$ref"].get<std::string>(), path);
    }
    if (s.contains("const")) {
      check_keys(s, path, {"const", "type"});
      return literal_value(s["const"]);
    }
    if (s.contains("enum")) {
      check_keys(s, path, {"enum", "type"});
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) bad(path + "/enum", "'enum' must be a non-empty array");
      std::vector<std::string> values;
      for (const json& v : e) values.push_back(v.dump());
      return literal_trie(values) + " " + use("space");
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      check_keys(s, path, {key});
      const json& list = s[key];
      if (!list.is_array() || list.empty()) bad(path + "/" + key, std::string("'") + key + "' must be a non-empty array");
      std::string alts;
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string at = std::to_string(i);
        alts += (i ? " | " : "") + visit(list[i], path + "/" + key + "/" + at, hint + "-" + at);
      }
      return new_rule(hint, alts);
    }
    if (s.contains("allOf")) {
      check_keys(s, path, {"allOf"});
      const json& list = s["allOf"];
      if (!list.is_array() || list.size() != 1) bad(path + "/allOf", "'allOf' is supported with exactly one schema");
      return visit(list[0], path + "/allOf/0", hint);
    }
    if (s.contains("type") && s["type"].is_array()) {
      const json& types = s["type"];
      if (types.empty()) bad(path + "/type", "'type' must not be an empty list");
      // Each type gets the keywords that apply to it ({"type": ["string", "null"], "maxLength": 3});
      // any other keyword goes to every branch, where it is refused or is an annotation.
      std::string alts;
      for (const json& t : types) {
        if (!t.is_string()) bad(path + "/type", "'type' must be a string or a list of strings");
        json one = json::object();
        for (const auto& [k, v] : s.items()) {
          const auto owner = type_keywords().find(k);
          if (k != "type" && (owner == type_keywords().end() || owner->second.count(t.get<std::string>()))) one[k] = v;
        }
        one["type"] = t;
        alts += (alts.empty() ? "" : " | ") + visit(one, path, hint);
      }
      return new_rule(hint, alts);
    }
    std::string type;
    if (s.contains("type")) {
      if (!s["type"].is_string()) bad(path + "/type", "'type' must be a string or a list of strings");
      type = s["type"].get<std::string>();
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      type = "object";
    } else if (s.contains("items") || s.contains("prefixItems")) {
      type = "array";
    } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength")) {
      type = "string";
    } else {
      check_keys(s, path, {});
      return use("value");
    }
    if (type == "string") return string_rule(s, path, hint);
    if (type == "integer") return integer_rule(s, path, hint);
    if (type == "number") return number_rule(s, path, hint);
    if (type == "boolean" || type == "null") {
      check_keys(s, path, {"type"});
      return use(type);
    }
    if (type == "array") return array_rule(s, path, hint);
    if (type == "object") return object_rule(s, path, hint);
    bad(path + "/type", "unknown type '" + type + "' (string, number, integer, boolean, null, array, object)");
  }

  std::string string_rule(const json& s, const std::string& path, const std::string& hint) {
    check_keys(s, path, {"type", "minLength", "maxLength", "pattern", "format"});
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern") || s.contains("format")) {
      if (lengths || (s.contains("pattern") && s.contains("format"))) {
        bad(path, "'pattern' or 'format' together with each other or with 'minLength' / 'maxLength' is not supported");
      }
      std::string body;
      if (s.contains("pattern")) {
        if (!s["pattern"].is_string()) bad(path + "/pattern", "'pattern' must be a string");
        try {
          body = regex_gbnf(s["pattern"].get<std::string>(), RegexText::json_string);
        } catch (const Error& e) {
          bad(path + "/pattern", e.what());
        }
      } else {
        const std::string format = s["format"].is_string() ? s["format"].get<std::string>() : "";
        const auto it = formats().find(format);
        if (it == formats().end()) bad(path + "/format", "'format' " + s["format"].dump() + " is not supported (date, time, date-time, uuid)");
        body = it->second;
      }
      return new_rule(hint, "\"\\\"\" " + body + " \"\\\"\" " + use("space"));
    }
    if (!lengths) return use("string");
    const int32_t lo = s.contains("minLength") ? count(s, "minLength", path) : 0;
    const int32_t hi = s.contains("maxLength") ? count(s, "maxLength", path) : -1;
    if (hi >= 0 && hi < lo) bad(path, "'maxLength' is below 'minLength'");
    use("char");
    const std::string reps = "{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "}";
    return new_rule(hint, "\"\\\"\" char" + reps + " \"\\\"\" " + use("space"));
  }

  // A bound of an integer: minimum / maximum, or the exclusive ones (a number since draft 6, a
  // boolean beside minimum / maximum in draft 4), as an inclusive integer.
  std::optional<int64_t> bound(const json& s, const std::string& path, bool lower) {
    const char* key = lower ? "minimum" : "maximum";
    const char* exclusive = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    std::optional<int64_t> out;
    const auto read = [&](const char* k, bool strict) {
      const json& v = s[k];
      if (!v.is_number()) bad(path + "/" + k, std::string("'") + k + "' must be a number");
      const double d = v.get<double>();
      if (!(std::fabs(d) < 1e15)) bad(path + "/" + k, std::string("'") + k + "' is beyond what 16 digits hold");
      double i = lower ? std::ceil(d) : std::floor(d);
      if (strict && i == d) i += lower ? 1 : -1;
      const int64_t b = static_cast<int64_t>(i);
      out = out ? (lower ? std::max(*out, b) : std::min(*out, b)) : b;
    };
    const bool draft4 = s.contains(exclusive) && s[exclusive].is_boolean();
    if (s.contains(key)) read(key, draft4 && s[exclusive].get<bool>());
    if (s.contains(exclusive) && !draft4) read(exclusive, true);
    return out;
  }

  // A number's bound: minimum / maximum, or the exclusive ones (a number since draft 6, a boolean
  // beside minimum / maximum in draft 4), the tighter where both are given, as the decimal it reads as.
  std::optional<DecimalBound> decimal_bound(const json& s, const std::string& path, bool lower) {
    const char* key = lower ? "minimum" : "maximum";
    const char* exclusive = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    std::optional<DecimalBound> out;
    const auto read = [&](const char* k, bool strict) {
      const std::optional<Decimal> d = Decimal::of(s[k]);
      if (!d) {
        bad(path + "/" + k, std::string("'") + k + "' must be a number below 1e15 in magnitude with at most 16 "
                            "fractional digits");
      }
      const DecimalBound b{*d, strict};
      if (!out) {
        out = b;
        return;
      }
      const int c = compare(b.value, out->value);
      if ((lower ? c > 0 : c < 0) || (c == 0 && strict)) out = b;
    };
    const bool draft4 = s.contains(exclusive) && s[exclusive].is_boolean();
    if (s.contains(key)) read(key, draft4 && s[exclusive].get<bool>());
    if (s.contains(exclusive) && !draft4) read(exclusive, true);
    return out;
  }

  std::string number_rule(const json& s, const std::string& path, const std::string& hint) {
    check_keys(s, path, {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"});
    const std::optional<DecimalBound> lo = decimal_bound(s, path, true), hi = decimal_bound(s, path, false);
    if (!lo && !hi) return use("number");
    const std::optional<std::string> range = decimal_range_gbnf(lo, hi);
    if (!range) bad(path, "no number lies between its minimum and maximum");
    return new_rule(hint, "(" + *range + ") " + use("space"));
  }

  std::string integer_rule(const json& s, const std::string& path, const std::string& hint) {
    check_keys(s, path, {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"});
    const std::optional<int64_t> lo = bound(s, path, true), hi = bound(s, path, false);
    if (!lo && !hi) return use("integer");
    if (lo && hi && *hi < *lo) bad(path, "no integer lies between its minimum and maximum");
    std::vector<std::string> parts;
    if (!lo || *lo < 0) {  // -x for x in [max(1, -hi), -lo]
      const int64_t a = hi && *hi < 0 ? -*hi : 1, b = lo ? -*lo : -1;
      parts.push_back("\"-\" (" + integer_range_gbnf(a, b) + ")");
    }
    if (!hi || *hi >= 0) parts.push_back(integer_range_gbnf(lo ? std::max<int64_t>(*lo, 0) : 0, hi ? *hi : -1));
    std::string body;
    for (const std::string& p : parts) body += (body.empty() ? "" : " | ") + p;
    return new_rule(hint, "(" + body + ") " + use("space"));
  }

  std::string array_rule(const json& s, const std::string& path, const std::string& hint) {
    check_keys(s, path, {"type", "items", "prefixItems", "minItems", "maxItems", "uniqueItems"});
    if (s.contains("uniqueItems") && s["uniqueItems"] != false) {
      bad(path + "/uniqueItems", "'uniqueItems': true is not supported");
    }
    const std::string sp = use("space");
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      const json& p = s["prefixItems"];
      if (!p.is_array() || p.size() > 4096) {
        bad(path + "/prefixItems", "'prefixItems' must be an array of at most 4096 schemas");
      }
      for (size_t i = 0; i < p.size(); ++i) {
        prefix.push_back(visit(p[i], path + "/prefixItems/" + std::to_string(i), hint + "-" + std::to_string(i)));
      }
    }
    std::string item;  // the items after the prefix; empty: none
    if (!s.contains("items")) {
      if (prefix.empty()) item = use("value");  // an array of anything
    } else if (!(s["items"].is_boolean() && !s["items"].get<bool>())) {
      item = visit(s["items"], path + "/items", hint + "-item");
    }
    const int32_t k = static_cast<int32_t>(prefix.size());
    const int32_t lo = s.contains("minItems") ? count(s, "minItems", path) : 0;
    int32_t hi = s.contains("maxItems") ? count(s, "maxItems", path) : -1;
    if (hi >= 0 && hi < lo) bad(path, "'maxItems' is below 'minItems'");
    if (item.empty()) hi = hi < 0 ? k : std::min(hi, k);
    if (lo > hi && hi >= 0) bad(path, "'minItems' asks for more items than 'prefixItems' gives and 'items' is false");
    // Items [0, m) are written out one by one (the prefix's, and the required ones); past m come
    // up to hi - m more of `item` (any number when hi is -1), each after a comma.
    const int32_t m = hi >= 0 ? std::min(std::max(lo, k), hi) : std::max(lo, k);
    std::string tail;
    if (!item.empty() && (hi < 0 || hi > m)) {
      const std::string more = hi < 0 ? "*" : "{0," + std::to_string(hi - m - (m == 0 ? 1 : 0)) + "}";
      tail = m == 0 ? "(" + item + " (\",\" " + sp + " " + item + ")" + more + ")?"
                    : "(\",\" " + sp + " " + item + ")" + more;
    }
    const auto item_at = [&](int32_t i) { return (i == 0 ? "" : "\",\" " + sp + " ") + (i < k ? prefix[i] : item); };
    // The optional items [lo, m), each the head of a rule holding the rest: linear in the items,
    // however many (a text written out would copy its tail once per item, and nest as deep).
    for (int32_t i = m - 1; i >= lo; --i) {
      tail = "(" + new_rule(hint + "-rest", item_at(i) + (tail.empty() ? "" : " " + tail)) + ")?";
    }
    std::string body = "\"[\" " + sp;
    for (int32_t i = 0; i < std::min(lo, m); ++i) body += " " + item_at(i);
    body += (tail.empty() ? "" : " " + tail) + " \"]\" " + sp;
    return new_rule(hint, body);
  }

  // A key other than the properties' names (sorted code points; names[lo, hi) share their first
  // `depth`), as llama.cpp's _not_strings writes it: a rule per trie node, taking the closing quote
  // unless the text so far is a name, a name's next character, or any other character and then
  // anything. (A name the model spells with \u escapes is not recognized as that name.)
  std::string other_key(const std::vector<std::vector<uint32_t>>& names, size_t lo, size_t hi, size_t depth,
                        const std::string& hint) {
    use("char");
    std::vector<std::string> alts;
    const bool is_name = lo < hi && names[lo].size() == depth;  // unique and sorted: the shorter first
    if (is_name) ++lo;
    if (!is_name) alts.push_back("\"\\\"\"");
    std::string others = "[^\"\\\\\\x00-\\x1F";
    for (size_t a = lo; a < hi;) {
      size_t b = a;
      while (b < hi && names[b][depth] == names[a][depth]) ++b;
      const uint32_t c = names[a][depth];
      char esc[16];
      std::snprintf(esc, sizeof esc, "\\U%08X", c);
      others += esc;
      alts.push_back(gbnf_literal(utf8_text(names[a], depth, depth + 1)) + " " + other_key(names, a, b, depth + 1, hint));
      a = b;
    }
    alts.push_back("(" + others + "] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})) char* \"\\\"\"");
    std::string body;
    for (const std::string& x : alts) body += (body.empty() ? "" : " | ") + x;
    return depth == 0 ? new_rule(hint + "-other-key", "\"\\\"\" (" + body + ")") : new_rule(hint + "-other-key", body);
  }

  std::string object_rule(const json& s, const std::string& path, const std::string& hint) {
    check_keys(s, path, {"type", "properties", "required", "additionalProperties"});
    // Nothing said of its members: any object (as {"type": "array"} is any array).
    if (!s.contains("properties") && !s.contains("required") && !s.contains("additionalProperties")) return use("object");
    const std::string sp = use("space");
    std::vector<std::pair<std::string, const json*>> props;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) bad(path + "/properties", "'properties' must be an object");
      for (const auto& [k, v] : s["properties"].items()) props.emplace_back(k, &v);
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) bad(path + "/required", "'required' must be an array of strings");
      for (const json& r : s["required"]) {
        if (!r.is_string()) bad(path + "/required", "'required' must be an array of strings");
        required.insert(r.get<std::string>());
      }
    }
    static const json kAny = json::object();
    std::set<std::string> listed;
    for (const auto& p : props) listed.insert(p.first);
    for (const std::string& r : required) {  // required but not described: any value
      if (!listed.count(r)) props.emplace_back(r, &kAny);
    }
    std::string extra;  // a pair of an additional property; empty: none allowed
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) {
        // The names as written without escapes (those with quotes, backslashes or control
        // characters are not kept out: the model writes them escaped).
        std::vector<std::vector<uint32_t>> names;
        for (const auto& p : props) {
          std::vector<uint32_t> cps = code_points(p.first);
          if (cps.size() > 1024) bad(path + "/properties", "a property name longer than 1024 characters beside 'additionalProperties'");
          if (std::none_of(cps.begin(), cps.end(), [](uint32_t c) { return c < 0x20 || c == '"' || c == '\\'; })) {
            names.push_back(std::move(cps));
          }
        }
        std::sort(names.begin(), names.end());
        names.erase(std::unique(names.begin(), names.end()), names.end());
        const std::string key = names.empty() ? use("string") : other_key(names, 0, names.size(), 0, hint) + " " + sp;
        extra = new_rule(hint + "-extra", key + " \":\" " + sp + " " +
                                              visit(a, path + "/additionalProperties", hint + "-extra-value"));
      }
    }
    const int32_t n = static_cast<int32_t>(props.size());
    std::vector<std::string> kv(n);
    for (int32_t i = 0; i < n; ++i) {
      const std::string& key = props[i].first;
      const std::string value = visit(*props[i].second, path + "/properties/" + pointer_escape(key), hint + "-" + key);
      kv[i] = gbnf_literal(json(key).dump()) + " " + sp + " \":\" " + sp + " " + value;
    }
    // head[i]: properties i.. with nothing written before; tail[i]: with something before (a
    // comma first). Built from the end, each a rule when it is used twice.
    std::string head = extra.empty() ? "" : "(" + extra + " (\",\" " + sp + " " + extra + ")*)?";
    std::string tail = extra.empty() ? "" : "(\",\" " + sp + " " + extra + ")*";
    for (int32_t i = n - 1; i >= 0; --i) {
      const std::string t = tail.empty() ? "" : new_rule(hint + "-tail", tail);
      const std::string after = t.empty() ? "" : " " + t;
      const std::string h = head.empty() ? "" : new_rule(hint + "-head", head);
      if (required.count(props[i].first)) {
        head = kv[i] + after;
        tail = "\",\" " + sp + " " + kv[i] + after;
      } else {
        head = "(" + kv[i] + after + (h.empty() ? ")?" : " | " + h + ")");
        tail = "(\",\" " + sp + " " + kv[i] + ")?" + after;
      }
    }
    return new_rule(hint, "\"{\" " + sp + " " + head + " \"}\" " + sp);
  }

  const json& root_;
  bool compact_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> used_, names_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
};

}  // namespace

std::string json_schema_gbnf(const json& schema, bool compact) { return SchemaCompiler(schema, compact).compile(); }

std::string json_object_gbnf(bool compact) {
  static const json kEmpty = json::object();
  return SchemaCompiler(kEmpty, compact).object_only();
}

std::string choice_gbnf(const std::vector<std::string>& choices) {
  if (choices.empty()) fail("guided_choice: the list of choices is empty");
  for (const std::string& c : choices) {
    if (c.empty()) fail("guided_choice: a choice is the empty string");
  }
  return "root ::= " + literal_trie(choices) + "\n";
}

}  // namespace kiln
