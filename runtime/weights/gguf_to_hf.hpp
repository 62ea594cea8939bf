// Conversion of a GGUF file (llama, qwen3 or deepseek2 architecture) into an HF checkpoint
// (config.json + model.safetensors) holding exactly the dequantized weights kiln runs, so HF
// transformers can be compared against kiln.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/core/dtype.hpp"
#include "runtime/weights/gguf_model.hpp"

namespace kiln {

// The LlamaForCausalLM, Qwen3ForCausalLM or DeepseekV2ForCausalLM config.json for these
// hyperparameters; `dtype` (F32 or BF16) becomes torch_dtype.
nlohmann::json gguf_hf_config(const GgufHyperparams& hp, DType dtype);

// Writes out_dir/config.json and out_dir/model.safetensors (creating out_dir). `dtype` is F32
// (lossless: every dequantized value is an fp32) or BF16 (rounded to nearest even). Converts one
// tensor at a time. Throws for architectures kiln does not read and for what HF's config cannot
// express.
void convert_gguf_to_hf(const std::string& gguf_path, const std::string& out_dir, DType dtype);

}  // namespace kiln
