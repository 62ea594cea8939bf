// kilnc — the kiln generator: one model config in, generated/<model>/ out.
//   kilnc CONFIG -o DIR        CONFIG: a kiln config (configs/*.yaml) or an HF config.json
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "codegen/config_load.hpp"
#include "codegen/emit.hpp"
#include "runtime/core/error.hpp"

namespace {

// The config path as written into generated files: relative to the working directory when it
// lies below it, so `kilnc configs/x.yaml` from the repository root is reproducible anywhere.
std::string display_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path rel = fs::relative(fs::absolute(path), fs::current_path(), ec);
  if (ec || rel.empty() || rel.string().starts_with("..")) return fs::absolute(path).lexically_normal().string();
  return rel.string();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kilnc: generate a model's CUDA kernels, forward graphs and reference forward from its config"};
  std::string config, out_dir;
  kiln::codegen::ImportOptions import;
  bool quiet = false, print_name = false;
  app.add_option("config", config, "kiln config (.yaml) or HF config.json")->required();
  app.add_option("-o,--output", out_dir, "output folder (default: generated/<model name>)");
  app.add_option("--name", import.name, "model name for an HF config.json (default: its folder's name)");
  app.add_option("--max-context", import.max_context,
                 "max context for an HF config.json (default: min(max_position_embeddings, 8192))")
      ->check(CLI::PositiveNumber);
  app.add_option("--chat-template", import.chat_template, "chat template for an HF config.json")
      ->check(CLI::IsMember({"none", "chatml", "llama3", "deepseek"}));
  app.add_option("--tensor-parallel", import.tensor_parallel,
                 "for an HF config.json: rank counts to build besides one GPU, e.g. 2,4 (build.tensor_parallel)")
      ->delimiter(',');
  app.add_flag("-q,--quiet", quiet, "print nothing but errors");
  app.add_flag("--print-name", print_name, "validate the config and print the model's name; write nothing");
  CLI11_PARSE(app, argc, argv);

  try {
    std::vector<std::string> warnings;
    kiln::codegen::ModelSpec spec = kiln::codegen::load_config(config, import, &warnings);
    spec.source = display_path(config);
    for (const auto& w : warnings) std::cerr << "kilnc: warning: " << w << "\n";
    if (print_name) {
      std::cout << spec.name << "\n";
      return 0;
    }
    if (out_dir.empty()) out_dir = "generated/" + spec.name;
    const auto files = kiln::codegen::emit_model(spec);
    const auto written = kiln::codegen::write_generated(out_dir, files);
    if (!quiet) {
      std::cout << "kilnc: " << spec.name << " -> " << out_dir << " (" << written.size() << " of " << files.size()
                << " files changed)\n";
    }
    return 0;
  } catch (const kiln::Error& e) {
    std::cerr << "kilnc: error: " << e.what() << "\n";
    return 1;
  }
}
