// gguf-to-hf FILE.gguf OUTDIR [--dtype f32|bf16]
// Writes OUTDIR/config.json and OUTDIR/model.safetensors: the Llama GGUF model as an HF
// checkpoint holding exactly the dequantized weights kiln runs.
#include <cstdio>
#include <map>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/core/error.hpp"
#include "runtime/weights/gguf_to_hf.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Convert a Llama-architecture GGUF file into an HF checkpoint (config.json + model.safetensors)"};
  std::string gguf_path;
  std::string out_dir;
  std::string dtype_text = "f32";
  app.add_option("gguf", gguf_path, "input .gguf file")->required()->check(CLI::ExistingFile);
  app.add_option("outdir", out_dir, "output directory (created if needed)")->required();
  app.add_option("--dtype", dtype_text,
                 "weight dtype written: f32 (default, lossless) or bf16 (rounded to nearest even)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  CLI11_PARSE(app, argc, argv);

  try {
    const kiln::DType dtype = dtype_text == "bf16" ? kiln::DType::BF16 : kiln::DType::F32;
    kiln::convert_gguf_to_hf(gguf_path, out_dir, dtype);
    std::printf("%s/config.json\n%s/model.safetensors\n", out_dir.c_str(), out_dir.c_str());
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "gguf-to-hf: %s\n", e.what());
    return 1;
  }
  return 0;
}
