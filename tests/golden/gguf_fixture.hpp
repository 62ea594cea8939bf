// The golden fixtures as GGUF images, written the way llama.cpp's convert_hf_to_gguf writes them:
// general.architecture llama, qwen3 or deepseek2 with its keys, llama's q/k rows permuted for
// llama.cpp's RoPE, Llama 3.1 frequency scaling as rope_freqs.weight, DeepSeek-V2's experts stacked
// per layer and its kv_b whole (older files) or split into k_b (transposed per head) and v_b, norms
// in F32. Quantized images quantize every matrix whose rows are whole 32-value blocks as
// llama-quantize's reference quantizers do (Q8_0, Q4_0, Q4_1); the rest stay F32. BF16 images
// round every matrix to bf16 (to nearest even, as convert_hf_to_gguf --outtype bf16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/model/model_def.hpp"
#include "runtime/model/tensor_source.hpp"

namespace kiln::golden {

constexpr uint32_t kF32 = 0, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kBF16 = 30;  // GGUF type ids

enum class KvB { whole, split };

// The fixture's weights (read from its safetensors, `hf`) as a GGUF image of `type` (kF32, kQ8_0,
// kQ4_0, kQ4_1, kQ5_0, kQ5_1 or kBF16). `rope_freqs_scale` multiplies llama3's rope_freqs.weight (0: the tensor is left out), so
// tests can make a file whose frequency scaling is not the model's. `kv_b`: DeepSeek-V2's layout.
// `types_by_suffix`: matrices whose GGUF name ends with a key take that type instead, as
// llama-quantize's mixes do (a Q4_K_M file's attn_v in Q6_K in some layers).
std::vector<std::byte> fixture_as_gguf(const ModelDef& model, const TensorSource& hf, uint32_t type,
                                       float rope_freqs_scale = 1.0f, KvB kv_b = KvB::split,
                                       const std::map<std::string, uint32_t>& types_by_suffix = {});

// A field of the config the model was generated from (ModelInfo::config_fields).
std::string config_field(const ModelInfo& m, const std::string& name);
int64_t int_field(const ModelInfo& m, const std::string& name);
float real_field(const ModelInfo& m, const std::string& name);

}  // namespace kiln::golden
