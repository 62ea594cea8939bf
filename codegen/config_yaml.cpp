// kiln YAML configs: strict (unknown fields are errors) and complete (architecture + build).
#include <yaml-cpp/yaml.h>

#include "codegen/config_arch.hpp"
#include "codegen/config_load.hpp"
#include "codegen/config_yaml_adapter.hpp"
#include "codegen/strict_yaml.hpp"

namespace kiln::codegen {

namespace {

Family parse_family(const YamlFields& model) {
  const std::string f = model.choice("family", {"llama", "qwen3", "deepseek_v2"});
  return f == "llama" ? Family::llama : f == "qwen3" ? Family::qwen3 : Family::deepseek_v2;
}

BuildSpec read_build(const YamlFields& build) {
  BuildSpec b;
  b.dtype = build.choice("dtype", {"bf16"});
  b.max_context = build.integer("max_context", 1);
  b.kv_page_size = build.integer("kv_page_size", 1);
  b.max_batch = build.integer("max_batch", 1);
  b.max_batched_tokens = build.integer("max_batched_tokens", 1);
  b.attention_partition = build.integer_or("attention_partition", b.attention_partition, 1);
  b.gpu_archs = build.string_list("gpu_archs");
  b.jit_ptx = build.boolean_or("jit_ptx", b.jit_ptx);
  b.megakernel_max_batch = build.integer_or("megakernel_max_batch", b.megakernel_max_batch, 0);
  if (build.has("tensor_parallel")) b.tensor_parallel = build.integer_list("tensor_parallel", 2);
  build.reject_unknown();
  return b;
}

}  // namespace

ModelSpec load_kiln_yaml(const std::string& path) {
  // Repeated keys, aliases and deep nesting are refused before the document is built.
  const YAML::Node root = load_yaml_strict(path);
  if (!root.IsDefined() || root.IsNull()) fail(path, ": the file is empty");

  const YamlFields doc(root, path, "");
  ModelSpec spec;
  spec.source = path;
  spec.name = doc.string("name");

  const YamlFields model = doc.section("model");
  spec.family = parse_family(model);
  read_architecture(model, spec);
  model.reject_unknown();

  if (doc.has("chat_template")) spec.chat_format = chat_format_from_name(doc.choice("chat_template", kChatFormatNames));
  spec.chat_default_system = doc.string_or("chat_default_system", "");
  spec.build = read_build(doc.section("build"));
  doc.reject_unknown();

  validate(spec);
  return spec;
}

}  // namespace kiln::codegen
