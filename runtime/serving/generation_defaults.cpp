#include "runtime/serving/generation_defaults.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/core/error.hpp"
#include "runtime/core/file_io.hpp"
#include "runtime/core/strict_json.hpp"

namespace kiln {

using nlohmann::json;

GenerationDefaults read_generation_defaults(const std::string& model_dir) {
  GenerationDefaults d;
  const std::filesystem::path path = std::filesystem::path(model_dir) / "generation_config.json";
  if (model_dir.empty() || !std::filesystem::exists(path)) return d;
  const json j = read_json_file(path.string());
  const auto number = [&](const char* key) -> std::optional<double> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    if (!j[key].is_number()) fail(path.string(), ": ", key, " must be a number, not ", j[key].dump());
    return j[key].get<double>();
  };
  // vLLM takes these from generation_config.json as the defaults of requests that leave them out.
  // do_sample false means greedy (transformers ignores temperature then).
  if (auto v = number("temperature")) d.temperature = static_cast<float>(*v);
  if (j.contains("do_sample") && j["do_sample"].is_boolean() && !j["do_sample"].get<bool>()) d.temperature = 0.0f;
  if (auto v = number("top_p")) d.top_p = static_cast<float>(*v);
  if (auto v = number("top_k")) d.top_k = static_cast<int32_t>(*v);
  if (auto v = number("min_p")) d.min_p = static_cast<float>(*v);
  if (auto v = number("repetition_penalty")) d.repetition_penalty = static_cast<float>(*v);
  if (auto v = number("max_new_tokens")) d.max_new_tokens = static_cast<int32_t>(*v);
  return d;
}

}  // namespace kiln
