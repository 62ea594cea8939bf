// The golden fixtures as GGUF files (tests/golden/gguf_fixture.hpp: written as llama.cpp's
// convert_hf_to_gguf writes them). Loaded through the GGUF source on the CPU reference backend, an
// F32 file must match HF exactly as the safetensors do, and a Q8_0 file (every matrix whose rows are
// whole blocks quantized as llama-quantize does) must keep HF's greedy tokens under the top-5 rule.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "generated/tiny-deepseek-v2-lite/model.hpp"
#include "generated/tiny-deepseek-v2/model.hpp"
#include "generated/tiny-llama/model.hpp"
#include "generated/tiny-qwen3/model.hpp"
#include "generated/tiny-smollm2/model.hpp"
#include "runtime/core/dtype.hpp"
#include "runtime/cpu/bf16_amx.hpp"
#include "runtime/cpu/bf16_avx512.hpp"
#include "runtime/engine/backend.hpp"
#include "runtime/model/gguf_source.hpp"
#include "runtime/model/model_config_check.hpp"
#include "runtime/model/rope_table.hpp"
#include "runtime/model/tensor_source.hpp"
#include "runtime/model/weight_loader.hpp"
#include "runtime/cpu/bf16_pack.hpp"
#include "runtime/weights/float_convert.hpp"
#include "runtime/weights/gguf_to_hf.hpp"
#include "runtime/weights/quant_repack.hpp"
#include "tests/golden/gguf_fixture.hpp"
#include "tests/golden/golden_fixture.hpp"
#include "tests/support/run_command.hpp"
#include "tests/weights/test_support.hpp"

using namespace kiln;

namespace {

using golden::KvB;

// A tied LM head that shares its embedding's matrix (the loader holds it once).
bool is_tied_to_another(const WeightSpec& spec, int64_t l, const LoadedWeights& w) {
  return spec.tied_to[0] != '\0' && w.table.get(spec.name, l) == w.table.get(spec.tied_to, l);
}
using golden::kF32;
using golden::kQ4_0;
using golden::kQ4_1;
using golden::kQ8_0;
using golden::fixture_as_gguf;

// `q8_0`: also a Q8_0 file (false where no matrix row is a whole number of 32-element blocks, so it
// would equal the F32 file).
void check_logits(const ModelDef& model, const golden::Fixture& fixture, const TensorSource& weights, const std::string& what) {
  const auto backend = make_ref_backend(model, WeightOrigin{&weights, 0}, BackendOptions{});
  for (size_t i = 0; i < fixture.prompts.size(); ++i) {
    const golden::Prompt& p = fixture.prompts[i];
    const golden::Run run = golden::run_prompt(model, *backend, p);
    const golden::LogitsComparison c = golden::compare_logits(p.logits, run.prompt_logits, model.info.vocab_size, 1e-3);
    INFO(what << " prompt " << i << ": worst logit difference " << c.worst << " × max|logit|");
    CHECK(c.first_bad_row == -1);
    CHECK(run.tokens == p.greedy);
  }
}

void check_model(const ModelDef& model, KvB kv_b = KvB::split, bool q8_0 = true) {
  const golden::Fixture fixture = golden::load_fixture(model.info.name);
  const auto hf = open_safetensors_source(fixture.dir);
  for (const uint32_t type : {kF32, kQ8_0}) {
    if (type == kQ8_0 && !q8_0) continue;
    const char* type_name = type == kF32 ? "F32" : "Q8_0";
    const std::vector<std::byte> image = fixture_as_gguf(model, *hf, type, 1.0f, kv_b);
    const std::string origin = std::string(model.info.name) + "-" + type_name + ".gguf";
    const auto gguf = open_gguf_source(std::make_shared<const GgufFile>(GgufFile::parse(image, origin)), model.info);
    const auto backend = make_ref_backend(model, WeightOrigin{gguf.get(), 0}, BackendOptions{});
    for (size_t i = 0; i < fixture.prompts.size(); ++i) {
      const golden::Prompt& p = fixture.prompts[i];
      const golden::Run run = golden::run_prompt(model, *backend, p);
      const golden::LogitsComparison c = golden::compare_logits(p.logits, run.prompt_logits, model.info.vocab_size, 1e-3);
      const golden::GreedyVerdict v = golden::top5_rule(model, *backend, p, run);
      std::printf("%-12s %-4s GGUF prompt %zu: prompt logits max|diff| %.2e x max|logit|; greedy %zu/%zu %s\n",
                  model.info.name, type_name, i, c.worst, v.agreeing, p.greedy.size(), v.text.c_str());
      INFO(origin << " prompt " << i << ": worst logit difference " << c.worst << " × max|logit|; greedy: " << v.text);
      if (type == kF32) {
        CHECK(c.first_bad_row == -1);
        CHECK(run.tokens == p.greedy);
      } else {
        // 8-bit weights: close, not exact (a routing decision flipped by rounding moves MoE logits most).
        CHECK(c.worst < 0.25);
        CHECK(v.ok);
      }
    }
  }
}

}  // namespace

TEST_CASE("GGUF files of tiny-llama (llama3 rope factors as rope_freqs.weight, permuted q/k) match HF") {
  check_model(models::tiny_llama::model_def());
}

TEST_CASE("GGUF files of tiny-qwen3 (qwen3 architecture, q/k norms) match HF") {
  check_model(models::tiny_qwen3::model_def());
}

TEST_CASE("GGUF files of tiny-smollm2 (rows of 144: matrices stay F32 where Q8_0 blocks do not fit) match HF") {
  check_model(models::tiny_smollm2::model_def());
}

TEST_CASE("GGUF files of tiny-deepseek-v2 (q LoRA, group-limited routing, YaRN, kv_b split into k_b / v_b) match HF") {
  check_model(models::tiny_deepseek_v2::model_def(), KvB::split);
}

TEST_CASE("A GGUF file of tiny-deepseek-v2-lite (no q LoRA, greedy routing, kv_b whole, as older files) matches HF") {
  check_model(models::tiny_deepseek_v2_lite::model_def(), KvB::whole, /*q8_0=*/false);
}

namespace {

// The values of an [n, k] matrix in the GPU's layout in format f that are not `values` (the fp32
// load's): exactly, or, `requantized` to Q8_0 from other blocks, within half a Q8_0 step (plus the
// fp16 rounding of the step).
int64_t values_off(MatrixFormat f, const std::byte* blocks, int64_t n, int64_t k, const float* values, bool requantized) {
  int64_t wrong = 0;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c0 = 0; c0 < k; c0 += 32) {
      float amax = 0;  // the Q8_0 step is amax / 127
      for (int64_t c = c0; c < c0 + 32; ++c) amax = std::max(amax, std::fabs(values[r * k + c]));
      // Half a step, plus the step's fp16 rounding (2^-11 of it) times the largest quant (127).
      const float limit = requantized ? (0.5f + 127.0f / 2048) * amax / 127 * 1.001f : 0.0f;
      for (int64_t c = c0; c < c0 + 32; ++c) {
        wrong += !(std::fabs(matrix_value(f, blocks, n, k, r, c) - values[r * k + c]) <= limit);
      }
    }
  }
  return wrong;
}

}  // namespace

// What the CUDA backend loads (WeightFormat::gpu), checked on the host: every matrix (projection or
// embedding table) a Q4_0, Q4_1, Q5_1 or Q8_0 file stores in whole blocks keeps them, holding exactly the
// values the fp32 load dequantizes (a tied LM head shares the embedding's); everything else
// (norms, rows of 144 values, MLA's kv_b, routed experts) is bf16. The counts are
// of the matrices a decode step reads whole: an untied embedding table is not one of them.
TEST_CASE("the GPU's load keeps a GGUF file's Q8_0 / Q4_0 / Q4_1 / Q5_1 matrices in their blocks, with ggml's values") {
  for (const ModelDef* model : {&models::tiny_llama::model_def(), &models::tiny_smollm2::model_def(),
                                &models::tiny_deepseek_v2::model_def()}) {
    const golden::Fixture fixture = golden::load_fixture(model->info.name);
    const auto hf = open_safetensors_source(fixture.dir);
    for (const uint32_t type : {kQ8_0, kQ4_0, kQ4_1, golden::kQ5_1}) {
      const MatrixFormat want = type == kQ4_0   ? MatrixFormat::q4_0
                                : type == kQ4_1 ? MatrixFormat::q4_1
                                : type == kQ8_0 ? MatrixFormat::q8_0
                                                : MatrixFormat::q5_1;
      const std::string origin = std::string(model->info.name) + "-" + matrix_format_name(want) + ".gguf";
      const std::vector<std::byte> image = fixture_as_gguf(*model, *hf, type);  // the file views it
      const auto gguf = open_gguf_source(std::make_shared<const GgufFile>(GgufFile::parse(image, origin)), model->info);
      HostSink gpu_sink, f32_sink;
      const LoadedWeights kept = load_weights(*model, *gguf, WeightFormat::gpu, gpu_sink);
      const LoadedWeights f32 = load_weights(*model, *gguf, WeightFormat::f32, f32_sink);
      const auto is_tied = [&](const WeightSpec& spec, int64_t l) { return is_tied_to_another(spec, l, kept); };
      // A lookup table counts as a projection where a tied LM head reads it.
      const auto streamed = [&](const WeightSpec& spec, int64_t l) {
        bool read = spec.matrix && !is_tied(spec, l) && !spec.lookup;
        for (const WeightSpec& other : *model->weights) read |= spec.lookup && other.tied_to == std::string(spec.name) && is_tied(other, l);
        return read;
      };
      int64_t quantized = 0, matrices = 0, lookups = 0, untied_lookups = 0;
      for (const WeightSpec& spec : *model->weights) {
        for (int64_t l = spec.per_layer ? spec.layer_first : -1; l < (spec.per_layer ? spec.layer_last : 0); ++l) {
          const MatrixFormat f = kept.table.format(spec.name, l);
          const int64_t n = spec.shape.front(), k = spec.shape.back();
          INFO(origin << ": " << spec.name << " layer " << l);
          if (is_tied(spec, l)) {  // the embedding's matrix, checked as that
            CHECK(f == kept.table.format(spec.tied_to, l));
            continue;
          }
          matrices += streamed(spec, l);
          const bool whole_blocks = spec.matrix && spec.experts == 0 && k % 32 == 0;
          CHECK(f == (whole_blocks ? want : MatrixFormat::bf16));
          if (f == MatrixFormat::bf16) continue;
          quantized += streamed(spec, l);
          lookups += spec.lookup;
          untied_lookups += spec.lookup && !streamed(spec, l);
          const auto* blocks = static_cast<const std::byte*>(kept.table.get(spec.name, l));
          CHECK(values_off(f, blocks, n, k, f32.table.get_as<float>(spec.name, l), false) == 0);
        }
      }
      INFO(origin);
      CHECK(quantized > 0);
      CHECK(lookups == (model->info.hidden_size % 32 == 0 ? 1 : 0));  // the embedding table keeps its blocks too
      CHECK(kept.lookup_blocks == (untied_lookups > 0 ? std::optional(want) : std::nullopt));
      CHECK(kept.quantized == quantized);
      CHECK(kept.requantized == 0);
      CHECK(kept.matrices == matrices);
      CHECK(kept.quantized_bytes < kept.quantized_bf16_bytes);
    }
  }
}

// A file whose stacked weights' pieces come in two block types, as llama-quantize's mixes store
// them (a Q4_K_M file's q and k in Q4_K, v in Q6_K): on the GPU and the fast CPU backend, pieces
// of two types one after the other keep both, the matrix in two parts (GpuMatrix::split,
// CpuMatrix's), each holding the file's values. Three runs of types requantize to Q8_0.
TEST_CASE("the GPU's and the CPU's loads keep a stacked weight's pieces of two block types as two parts") {
  const ModelDef& model = models::tiny_llama::model_def();
  const ModelInfo& m = model.info;
  const auto hf = open_safetensors_source(golden::load_fixture(m.name).dir);
  const auto load = [&](const std::map<std::string, uint32_t>& mix, WeightFormat format, HostSink& sink) {
    const std::vector<std::byte> image = fixture_as_gguf(model, *hf, kQ4_0, 1.0f, KvB::split, mix);
    const auto gguf = open_gguf_source(std::make_shared<const GgufFile>(GgufFile::parse(image, "mix.gguf")), m);
    return load_weights(model, *gguf, format, sink);
  };
  const std::map<std::string, uint32_t> v_up_q8 = {{"attn_v.weight", kQ8_0}, {"ffn_up.weight", kQ8_0}};
  HostSink f32_sink, runs_sink;
  const LoadedWeights f32 = load(v_up_q8, WeightFormat::f32, f32_sink);
  const int64_t qk_rows = (m.num_attention_heads + m.num_key_value_heads) * m.head_dim;
  for (const WeightFormat format : {WeightFormat::gpu, WeightFormat::cpu}) {
    const bool gpu = format == WeightFormat::gpu;
    HostSink sink;
    const LoadedWeights kept = load(v_up_q8, format, sink);
    INFO((gpu ? "GPU: " : "CPU: ") << weight_formats_text(kept, "bf16"));
    for (const auto& [name, split] : {std::pair<std::string, int64_t>{"layers.{L}.qkv_proj", qk_rows},
                                      std::pair<std::string, int64_t>{"layers.{L}.gate_up_proj", m.intermediate_size}}) {
      const WeightSpec* spec = nullptr;
      for (const WeightSpec& w : *model.weights) spec = w.name == name ? &w : spec;
      REQUIRE(spec != nullptr);
      const int64_t n = spec->shape[0], k = spec->shape[1];
      for (int64_t l = spec->layer_first; l < spec->layer_last; ++l) {
        INFO(name << " layer " << l);
        const GpuMatrix g = kept.table.get_matrix<uint16_t>(name, l);  // CpuMatrix's fields alike
        CHECK(g.format == MatrixFormat::q4_0);
        CHECK(g.split == split);
        CHECK(g.tail_format == MatrixFormat::q8_0);
        REQUIRE(g.tail != nullptr);
        const auto value = [&](MatrixFormat f, const void* part, int64_t rows, int64_t r, int64_t c) {
          const auto* bytes = static_cast<const std::byte*>(part);
          return gpu ? matrix_value(f, bytes, rows, k, r, c) : cpu_matrix_value(f, bytes, k, r, c);
        };
        const float* values = f32.table.get_as<float>(name, l);
        int64_t wrong = 0;
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t c = 0; c < k; ++c) {
            const float v = r < split ? value(g.format, g.data, split, r, c) : value(g.tail_format, g.tail, n - split, r - split, c);
            wrong += v != values[r * k + c];
          }
        }
        CHECK(wrong == 0);
      }
    }
    CHECK(kept.two_formats == 2 * m.num_layers);
    CHECK(kept.requantized == 0);
    CHECK(weight_formats_text(kept, "bf16").find("with rows in a second format") != std::string::npos);
  }
  // q Q4_0, k Q8_0, v Q4_0: three runs, requantized to Q8_0.
  const std::map<std::string, uint32_t> k_q8 = {{"attn_k.weight", kQ8_0}};
  const LoadedWeights runs = load(k_q8, WeightFormat::gpu, runs_sink);
  CHECK(runs.table.format("layers.{L}.qkv_proj", 0) == MatrixFormat::q8_0);
  CHECK(runs.table.get_matrix<uint16_t>("layers.{L}.qkv_proj", 0).split == 0);
  CHECK(runs.requantized == m.num_layers);
  CHECK(runs.two_formats == 0);
  HostSink runs_f32_sink;
  const LoadedWeights runs_f32 = load(k_q8, WeightFormat::f32, runs_f32_sink);
  const int64_t qkv_rows = qk_rows + m.num_key_value_heads * m.head_dim;
  CHECK(values_off(MatrixFormat::q8_0, static_cast<const std::byte*>(runs.table.get("layers.{L}.qkv_proj", 1)), qkv_rows,
                   m.hidden_size, runs_f32.table.get_as<float>("layers.{L}.qkv_proj", 1), true) == 0);
}

// A BF16 file on the fast CPU backend (WeightFormat::cpu) and the GPU (WeightFormat::gpu, checked on
// the host): its bf16 tensors are the file's bits, read straight from the mapping where the rows
// are HF's (bf16_rows) and through fp32 where they are not (llama's permuted q/k rows, DeepSeek's
// split kv_b); the GPU's stacked experts start past the tensor's row 0.
TEST_CASE("the CPU's and the GPU's loads keep a BF16 GGUF file's bf16 rows as the file holds them") {
  for (const ModelDef* model : {&models::tiny_llama::model_def(), &models::tiny_qwen3::model_def(),
                                &models::tiny_deepseek_v2::model_def()}) {
    const golden::Fixture fixture = golden::load_fixture(model->info.name);
    const auto hf = open_safetensors_source(fixture.dir);
    const std::string origin = std::string(model->info.name) + "-BF16.gguf";
    const std::vector<std::byte> image = fixture_as_gguf(*model, *hf, golden::kBF16);
    const auto gguf = open_gguf_source(std::make_shared<const GgufFile>(GgufFile::parse(image, origin)), model->info);
    HostSink f32_sink;
    const LoadedWeights f32 = load_weights(*model, *gguf, WeightFormat::f32, f32_sink);
    for (const WeightFormat format : {WeightFormat::cpu, WeightFormat::gpu}) {
      HostSink sink;
      const LoadedWeights kept = load_weights(*model, *gguf, format, sink);
      int64_t bf16_matrices = 0, packed = 0;
      for (const WeightSpec& spec : *model->weights) {
        for (int64_t l = spec.per_layer ? spec.layer_first : -1; l < (spec.per_layer ? spec.layer_last : 0); ++l) {
          const MatrixFormat f = kept.table.format(spec.name, l);
          if (f != MatrixFormat::bf16 && f != MatrixFormat::bf16_packed) continue;
          INFO(origin << ": " << spec.name << " layer " << l << (f == MatrixFormat::bf16_packed ? " (packed)" : ""));
          ++bf16_matrices;
          const auto* bits = static_cast<const uint16_t*>(kept.table.get(spec.name, l));
          std::vector<uint16_t> unpacked;
          if (f == MatrixFormat::bf16_packed) {  // the fast CPU backend's (bf16_pack.hpp): the same bits back
            const int64_t n = spec.shape[0], k = spec.shape[1];
            unpacked.resize(static_cast<size_t>(n * k));
            for (int64_t r = 0; r < n; ++r) {
              unpack_bf16_row(static_cast<const std::byte*>(kept.table.get(spec.name, l)), n, k, r, unpacked.data() + r * k);
            }
            bits = unpacked.data();
            packed += !is_tied_to_another(spec, l, kept);
          }
          const float* values = f32.table.get_as<float>(spec.name, l);
          std::vector<float> back(static_cast<size_t>(spec.numel()));
          bf16_elements_to_f32(reinterpret_cast<const std::byte*>(bits), back);
          int64_t wrong = 0;
          for (int64_t i = 0; i < spec.numel(); ++i) wrong += back[static_cast<size_t>(i)] != values[i];
          CHECK(wrong == 0);
        }
      }
      INFO(origin << (format == WeightFormat::cpu ? " on the CPU" : " on the GPU"));
      CHECK(bf16_matrices > 0);
      // The fast CPU backend packs its projections where its kernel unpacks them (not on the GPU).
      CHECK(packed == (format == WeightFormat::cpu && cpu::packed_bf16_available() && !cpu::amx_bf16_available() ? kept.packed_bf16 : 0));
      if (format == WeightFormat::cpu && cpu::packed_bf16_available() && !cpu::amx_bf16_available()) CHECK(packed > 0);
    }
  }
}

// The tiny Llama fixture as a GGUF file of `type` whose layer 1 ffn_down holds an fp16 NaN at byte
// `offset` of its block 2 (0: the scale d; 2: Q4_1's / Q5_1's min m): the load in `format` refuses
// it, naming the tensor, the block, which of the two it is and the row.
namespace {
void check_nan_in_block(WeightFormat format, uint32_t type, int offset, const char* what) {
  const ModelDef& model = models::tiny_llama::model_def();
  const auto hf = open_safetensors_source(golden::load_fixture(model.info.name).dir);
  std::vector<std::byte> image = fixture_as_gguf(model, *hf, type);
  const GgufFile clean = GgufFile::parse(image, "x.gguf");
  const GgufTensor* t = clean.find_tensor("blk.1.ffn_down.weight");
  REQUIRE(t != nullptr);
  const size_t at = static_cast<size_t>(t->bytes.data() - image.data()) + 2 * ggml_block_bytes(t->type) + offset;
  image[at] = std::byte{0x00};
  image[at + 1] = std::byte{0x7E};  // fp16 NaN
  const auto gguf = open_gguf_source(std::make_shared<const GgufFile>(GgufFile::parse(image, "x.gguf")), model.info);
  HostSink sink;
  INFO(ggml_type_name(t->type) << " " << what);
  CHECK_KILN_ERROR(load_weights(model, *gguf, format, sink), "x.gguf", "model.layers.1.mlp.down_proj.weight",
                   std::string("NaN or infinite ") + what + " in block 2", "at row 0", "corrupt");
}
}  // namespace

// A NaN block scale in a projection: the GPU's load names the tensor and the row, kept in its blocks
// (Q8_0, Q4_1, Q5_0, Q5_1: scale or min) or requantized (a qkv_proj of three runs of types: the
// dequantized values are checked).
TEST_CASE("the GPU's load refuses a NaN block scale in a GGUF projection, naming the tensor") {
  const ModelDef& model = models::tiny_llama::model_def();
  const auto hf = open_safetensors_source(golden::load_fixture(model.info.name).dir);
  {
    std::vector<std::byte> image = fixture_as_gguf(model, *hf, kQ4_0, 1.0f, KvB::split, {{"attn_k.weight", kQ8_0}});
    const GgufFile clean = GgufFile::parse(image, "x.gguf");
    const GgufTensor* t = clean.find_tensor("blk.1.attn_q.weight");
    REQUIRE(t != nullptr);
    const size_t at = static_cast<size_t>(t->bytes.data() - image.data()) + 2 * ggml_block_bytes(t->type);
    image[at] = std::byte{0x00};
    image[at + 1] = std::byte{0x7E};  // fp16 NaN
    const auto gguf = open_gguf_source(std::make_shared<const GgufFile>(GgufFile::parse(image, "x.gguf")), model.info);
    HostSink sink;
    CHECK_KILN_ERROR(load_weights(model, *gguf, WeightFormat::gpu, sink), "x.gguf",
                     "model.layers.1.self_attn.q_proj.weight", "NaN", "corrupt");
  }
  for (const auto& [type, offset, what] : {std::tuple{kQ8_0, 0, "scale"}, std::tuple{kQ4_1, 0, "scale"},
                                           std::tuple{golden::kQ5_0, 0, "scale"}, std::tuple{golden::kQ5_1, 0, "scale"},
                                           std::tuple{golden::kQ5_1, 2, "min"}}) {
    check_nan_in_block(WeightFormat::gpu, type, offset, what);
  }
}

// The fast CPU backend keeps Q8_0, Q4_1 and Q5_1 blocks as stored: a NaN scale, or a NaN Q4_1 /
// Q5_1 min, is refused naming the tensor, the block and which of the two it is.
TEST_CASE("the fast CPU backend's load refuses a NaN block scale or min in a GGUF projection, naming it") {
  for (const auto& [type, offset, what] : {std::tuple{kQ8_0, 0, "scale"}, std::tuple{kQ4_1, 0, "scale"},
                                           std::tuple{kQ4_1, 2, "min"}, std::tuple{golden::kQ5_1, 2, "min"}}) {
    check_nan_in_block(WeightFormat::cpu, type, offset, what);
  }
}

TEST_CASE("a GGUF file of another model or another rope scaling is refused by name") {
  const ModelDef& llama = models::tiny_llama::model_def();
  const auto hf = open_safetensors_source(golden::load_fixture(llama.info.name).dir);
  const auto open = [](const std::vector<std::byte>& image, const ModelInfo& m) {
    return open_gguf_source(std::make_shared<const GgufFile>(GgufFile::parse(image, "x.gguf")), m);
  };
  // A llama file for a qwen3 binary: the architecture is named before any shape.
  CHECK_KILN_ERROR(open(fixture_as_gguf(llama, *hf, kF32), models::tiny_qwen3::model_def().info), "x.gguf",
                   "model type is llama in the GGUF file but qwen3 in tiny-qwen3");
  CHECK_KILN_ERROR(open(fixture_as_gguf(llama, *hf, kF32, 0.0f), llama.info), "x.gguf",
                   "rope scaling is default in the GGUF file but llama3 in tiny-llama", "rope_freqs.weight (both absent)");
  CHECK_KILN_ERROR(open(fixture_as_gguf(llama, *hf, kF32, 1.5f), llama.info), "x.gguf", "rope_freqs.weight[",
                   "another rope_scaling");
}

// gguf-to-hf (the tool that lets HF transformers check a GGUF file against kiln) writes a directory
// whose config.json the binary accepts field by field and whose weights give HF's logits.
// (tiny-llama is left out: gguf-to-hf refuses Llama 3.1 rope_freqs, which HF's config cannot hold.)
TEST_CASE("gguf-to-hf turns GGUF files of every family into model directories the binary accepts") {
  for (const ModelDef* model : {&models::tiny_qwen3::model_def(), &models::tiny_smollm2::model_def(),
                                &models::tiny_deepseek_v2::model_def(), &models::tiny_deepseek_v2_lite::model_def()}) {
    INFO(model->info.name);
    const golden::Fixture fixture = golden::load_fixture(model->info.name);
    const auto hf = open_safetensors_source(fixture.dir);
    test::TempDir dir;
    test::write_file(dir.file("model.gguf"), fixture_as_gguf(*model, *hf, kF32));
    convert_gguf_to_hf(dir.file("model.gguf"), dir.file("hf"), DType::F32);
    CHECK_NOTHROW(check_model_config(dir.file("hf"), model->info));
    check_logits(*model, fixture, *open_safetensors_source(dir.file("hf")), std::string(model->info.name) + " via gguf-to-hf");
  }
}

// The binary on a GGUF of weights only (no vocabulary, as llama.cpp's benchmark files and some
// conversions are): prompt ids run and give HF's greedy tokens; a text prompt asks for a tokenizer.
TEST_CASE("the binary runs a weights-only GGUF on prompt ids, and asks for a tokenizer for text") {
  const ModelDef& model = models::tiny_llama::model_def();
  const golden::Fixture fixture = golden::load_fixture(model.info.name);
  test::TempDir dir;
  const std::string path = dir.file("weights-only.gguf");
  test::write_file(path, fixture_as_gguf(model, *open_safetensors_source(fixture.dir), kF32));
  const golden::Prompt& p = fixture.prompts[1];
  std::string ids;
  for (const int32_t id : p.ids) ids.append(ids.empty() ? "" : ",").append(std::to_string(id));
  const std::string run = std::string(KILN_TINY_LLAMA) + " --backend ref --gguf " + path;
  const test::CommandResult r = test::run_command(run + " --prompt-ids " + ids + " --max-tokens " +
                                                  std::to_string(p.greedy.size()) + " --temperature 0 --ignore-eos --output-format json");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  CHECK(j["requests"][0]["output_ids"].get<std::vector<int32_t>>() == p.greedy);
  const test::CommandResult text = test::run_command(run + " --prompt hello --max-tokens 1");
  INFO(text.output);
  CHECK(text.exit_code == 1);
  CHECK(text.output.find("needs a tokenizer") != std::string::npos);
}
