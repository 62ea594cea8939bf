#include "codegen/model_spec.hpp"

#include "runtime/core/error.hpp"

namespace kiln::codegen {

const char* to_string(Family f) {
  switch (f) {
    case Family::llama: return "llama";
    case Family::qwen3: return "qwen3";
    case Family::deepseek_v2: return "deepseek_v2";
  }
  return "?";
}

const char* to_string(RopeType r) {
  switch (r) {
    case RopeType::standard: return "default";
    case RopeType::llama3: return "llama3";
    case RopeType::yarn: return "yarn";
  }
  return "?";
}

const char* to_string(TopkMethod t) {
  return t == TopkMethod::greedy ? "greedy" : "group_limited_greedy";
}

const char* to_string(ChatFormat c) {
  switch (c) {
    case ChatFormat::none: return "none";
    case ChatFormat::chatml: return "chatml";
    case ChatFormat::llama3: return "llama3";
    case ChatFormat::deepseek: return "deepseek";
  }
  return "?";
}

ChatFormat chat_format_from_name(const std::string& name) {
  if (name == "chatml") return ChatFormat::chatml;
  if (name == "llama3") return ChatFormat::llama3;
  if (name == "deepseek") return ChatFormat::deepseek;
  if (name == "none") return ChatFormat::none;
  fail("unknown chat template '", name, "'; supported: none, chatml, llama3, deepseek");
}

std::string ModelSpec::id() const {
  std::string out = name;
  for (char& c : out) {
    if (c == '-' || c == '.') c = '_';
  }
  return out;
}

std::string ModelSpec::ns() const {
  return "kiln::models::" + id() + (ranks > 1 ? "::tp" + std::to_string(ranks) : "");
}

}  // namespace kiln::codegen
