// Strict YAML for kiln configs, the YAML twin of runtime/core/strict_json.hpp. yaml-cpp accepts a
// mapping with a repeated key (lookups then see the first value, silently) and aliases (one node
// referenced many times: a config walk could expand them exponentially). Before the document is
// built, a pass over the parser's events refuses both, nesting deeper than a limit (the parse
// stops there, so its recursion stays shallow), keys that are not plain scalars, and more than one
// document.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

namespace kiln::codegen {

inline constexpr int kYamlMaxDepth = 64;

// The document in the YAML file at `path` (a regular file, size-limited like every text file);
// throws kiln::Error "path:LINE: ..." naming the key or the problem.
YAML::Node load_yaml_strict(const std::string& path, int max_depth = kYamlMaxDepth);

}  // namespace kiln::codegen
