// FP8 checkpoints: each golden fixture rewritten the way the published FP8 models are (Qwen3-FP8,
// DeepSeek FP8: every linear layer's weight F8_E4M3 with a weight_scale_inv per block, config.json's
// quantization_config naming the block shape; embeddings, the LM head, norms and the MoE router
// left in their own type) and run on the CPU reference backend. The directory passes the binary's
// config check and computes exactly what an fp32 checkpoint of the dequantized values (code ×
// block scale) computes, which checks the block indexing; the accuracy against HF's bf16-trained
// fixture is printed (logits within a bound; greedy tokens under the top-5 rule, which E4M3's three
// mantissa bits can break on these tiny random models, whose next-token margins are small). Blocks
// of 16 × 16 here (the published ones are 128 × 128, larger than these tiny matrices) so that every
// matrix has several, partial ones at the edges included.
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <functional>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "generated/tiny-deepseek-v2-lite/model.hpp"
#include "generated/tiny-deepseek-v2/model.hpp"
#include "generated/tiny-llama/model.hpp"
#include "generated/tiny-qwen3/model.hpp"
#include "runtime/core/dtype.hpp"
#include "runtime/core/strict_json.hpp"
#include "runtime/engine/backend.hpp"
#include "runtime/model/model_config_check.hpp"
#include "runtime/model/tensor_source.hpp"
#include "runtime/weights/safetensors.hpp"
#include "tests/golden/golden_fixture.hpp"
#include "tests/weights/test_support.hpp"

using namespace kiln;

namespace {

constexpr int64_t kBlock = 16;

// Which HF tensors an FP8 checkpoint stores in FP8: the linear layers' weights.
bool stored_as_fp8(const std::string& name, const std::vector<int64_t>& shape) {
  return shape.size() == 2 && name.ends_with("_proj.weight") && !name.ends_with("embed_tokens.weight");
}

struct Fp8Tensor {
  std::vector<uint8_t> codes;
  std::vector<float> scale_inv;  // [ceil(rows / kBlock), ceil(cols / kBlock)]
};

// Per block: scale = max|x| / 448 (E4M3's largest value), codes = x / scale rounded to E4M3.
Fp8Tensor quantize_fp8(const std::vector<float>& x, int64_t rows, int64_t cols) {
  const int64_t br = (rows + kBlock - 1) / kBlock, bc = (cols + kBlock - 1) / kBlock;
  Fp8Tensor t{std::vector<uint8_t>(x.size()), std::vector<float>(static_cast<size_t>(br * bc))};
  for (int64_t i = 0; i < br; ++i) {
    for (int64_t j = 0; j < bc; ++j) {
      float amax = 0;
      for (int64_t r = i * kBlock; r < std::min(rows, (i + 1) * kBlock); ++r) {
        for (int64_t c = j * kBlock; c < std::min(cols, (j + 1) * kBlock); ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
      }
      const float scale = amax > 0 ? amax / 448.0f : 1.0f;
      t.scale_inv[i * bc + j] = scale;
      for (int64_t r = i * kBlock; r < std::min(rows, (i + 1) * kBlock); ++r) {
        for (int64_t c = j * kBlock; c < std::min(cols, (j + 1) * kBlock); ++c) t.codes[r * cols + c] = f32_to_f8e4m3(x[r * cols + c] / scale);
      }
    }
  }
  return t;
}

// The fixture in `dir` rewritten as an FP8 checkpoint in `out` (config.json + model.safetensors);
// `config_edit` may change the written config; with `dequantized`, also the fp32 checkpoint of the
// values the FP8 one holds (code × scale). Returns how many matrices became FP8.
int write_fp8_checkpoint(const std::string& dir, const std::string& out,
                         const std::function<void(nlohmann::json&)>& config_edit = {}, const std::string& dequantized = "") {
  const auto hf = open_safetensors_source(dir);
  std::vector<std::vector<std::byte>> storage;  // keeps every tensor's bytes alive until written
  std::vector<TensorToWrite> tensors, plain;
  int fp8 = 0;
  for (const std::string& name : hf->names()) {
    const std::vector<int64_t> shape = *hf->shape(name);
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
    std::vector<float> values(static_cast<size_t>(rows * shape.back()));
    hf->read_rows(name, 0, rows, values.data());
    if (!stored_as_fp8(name, shape)) {
      storage.push_back(test::to_bytes(values));
      tensors.push_back({name, DType::F32, shape, storage.back()});
      plain.push_back(tensors.back());
      continue;
    }
    ++fp8;
    Fp8Tensor q = quantize_fp8(values, shape[0], shape[1]);
    const int64_t scale_cols = (shape[1] + kBlock - 1) / kBlock;
    for (size_t e = 0; e < values.size(); ++e) {
      const int64_t r = static_cast<int64_t>(e) / shape[1], c = static_cast<int64_t>(e) % shape[1];
      values[e] = f8e4m3_to_f32(q.codes[e]) * q.scale_inv[r / kBlock * scale_cols + c / kBlock];
    }
    storage.push_back(test::to_bytes(values));
    plain.push_back({name, DType::F32, shape, storage.back()});
    storage.push_back(test::to_bytes(q.codes));
    tensors.push_back({name, DType::F8_E4M3, shape, storage.back()});
    storage.push_back(test::to_bytes(q.scale_inv));
    tensors.push_back({name + "_scale_inv", DType::F32, {(shape[0] + kBlock - 1) / kBlock, (shape[1] + kBlock - 1) / kBlock},
                       storage.back()});
  }
  write_safetensors(out + "/model.safetensors", tensors);
  if (!dequantized.empty()) {
    write_safetensors(dequantized + "/model.safetensors", plain);
    std::filesystem::copy_file(dir + "/config.json", dequantized + "/config.json");
  }
  nlohmann::json config = read_json_file(dir + "/config.json");
  config["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                   {"weight_block_size", {kBlock, kBlock}}};
  if (config_edit) config_edit(config);
  std::ofstream(out + "/config.json") << config.dump(2);
  return fp8;
}

void check_model(const ModelDef& model) {
  const golden::Fixture fixture = golden::load_fixture(model.info.name);
  test::TempDir dir, reference;
  const int fp8 = write_fp8_checkpoint(fixture.dir, dir.path().string(), {}, reference.path().string());
  CHECK(fp8 >= 4 * model.info.num_layers - 1);  // at least q/kv/o and the MLP's of (nearly) every layer
  CHECK_NOTHROW(check_model_config(dir.path().string(), model.info));
  const auto weights = open_safetensors_source(dir.path().string());
  const auto backend = make_ref_backend(model, WeightOrigin{weights.get(), 0}, BackendOptions{});
  const auto reference_weights = open_safetensors_source(reference.path().string());
  const auto reference_backend = make_ref_backend(model, WeightOrigin{reference_weights.get(), 0}, BackendOptions{});
  for (size_t i = 0; i < fixture.prompts.size(); ++i) {
    const golden::Prompt& p = fixture.prompts[i];
    const golden::Run run = golden::run_prompt(model, *backend, p);
    const golden::Run exact = golden::run_prompt(model, *reference_backend, p);
    const golden::LogitsComparison c = golden::compare_logits(p.logits, run.prompt_logits, model.info.vocab_size, 1e-3);
    const golden::GreedyVerdict v = golden::top5_rule(model, *backend, p, run);
    std::printf("%-22s FP8 prompt %zu: %d FP8 matrices; against HF: prompt logits max|diff| %.2e x max|logit|, "
                "greedy %zu/%zu %s\n", model.info.name, i, fp8, c.worst, v.agreeing, p.greedy.size(), v.text.c_str());
    INFO(model.info.name << " FP8 prompt " << i << ": worst logit difference from HF " << c.worst);
    CHECK(run.prompt_logits == exact.prompt_logits);  // bit for bit: the FP8 reader decodes as written
    CHECK(run.tokens == exact.tokens);
    CHECK(c.worst < 0.25);  // E4M3 keeps 3 mantissa bits: up to 6% per weight
  }
}

}  // namespace

TEST_CASE("FP8 checkpoint of tiny-llama (block scales) keeps HF's greedy tokens") {
  check_model(models::tiny_llama::model_def());
}

TEST_CASE("FP8 checkpoint of tiny-qwen3 (block scales) keeps HF's greedy tokens") {
  check_model(models::tiny_qwen3::model_def());
}

TEST_CASE("FP8 checkpoint of tiny-deepseek-v2-lite (MLA and per-expert matrices in FP8) keeps HF's greedy tokens") {
  check_model(models::tiny_deepseek_v2_lite::model_def());
}

TEST_CASE("an FP8 checkpoint's codes and block scales as the GPU's loader reads them give read_rows' values") {
  // The source the GPU keeps as stored (fp8_blocks, fp8_codes, fp8_scales) against the values the
  // CPU reads (read_rows: code × scale), every element of every FP8 matrix.
  const golden::Fixture fixture = golden::load_fixture("tiny-qwen3");
  test::TempDir dir;
  const int fp8 = write_fp8_checkpoint(fixture.dir, dir.path().string());
  const auto source = open_safetensors_source(dir.path().string());
  int matrices = 0;
  for (const std::string& name : source->names()) {
    const auto blocks = source->fp8_blocks(name);
    if (!blocks) continue;
    ++matrices;
    CHECK((blocks->rows == kBlock && blocks->cols == kBlock));
    const std::vector<int64_t> shape = *source->shape(name);
    const int64_t rows = shape[0], cols = shape[1];
    std::vector<float> values(static_cast<size_t>(rows * cols)), scales(static_cast<size_t>((cols + kBlock - 1) / kBlock));
    source->read_rows(name, 0, rows, values.data());
    int64_t wrong = 0;
    for (int64_t r = 0; r < rows; ++r) {
      source->fp8_scales(name, r / kBlock, scales);
      const std::span<const uint8_t> codes = source->fp8_codes(name, r);
      REQUIRE(static_cast<int64_t>(codes.size()) == cols);
      for (int64_t c = 0; c < cols; ++c) wrong += f8e4m3_to_f32(codes[c]) * scales[c / kBlock] != values[r * cols + c];
    }
    INFO(name);
    CHECK(wrong == 0);
    std::vector<float> short_row(scales.size() + 1);
    CHECK_KILN_ERROR(source->fp8_scales(name, 0, short_row), "internal", "_scale_inv");
  }
  CHECK(matrices == fp8);
}

TEST_CASE("FP8 checkpoints kiln cannot read are refused naming the file and field") {
  const golden::Fixture fixture = golden::load_fixture("tiny-qwen3");
  SECTION("another quantization method") {
    test::TempDir dir;
    write_fp8_checkpoint(fixture.dir, dir.path().string(), [](nlohmann::json& c) { c["quantization_config"]["quant_method"] = "gptq"; });
    CHECK_KILN_ERROR(open_safetensors_source(dir.path().string()), "config.json", "quantization_config", "\"gptq\"", "fp8");
  }
  SECTION("a block shape the scales do not have") {
    test::TempDir dir;
    write_fp8_checkpoint(fixture.dir, dir.path().string(), [](nlohmann::json& c) {
      c["quantization_config"]["weight_block_size"] = {128, 128};
    });
    CHECK_KILN_ERROR(open_safetensors_source(dir.path().string()), "_scale_inv\"", "expected [1, 1]", "128 × 128 block");
  }
  SECTION("FP8 without quantization_config") {
    test::TempDir dir;
    write_fp8_checkpoint(fixture.dir, dir.path().string(), [](nlohmann::json& c) { c.erase("quantization_config"); });
    CHECK_KILN_ERROR(open_safetensors_source(dir.path().string()), "is F8_E4M3 but config.json has no quantization_config");
  }
}

TEST_CASE("E4M3: every code converts exactly and back") {
  int finite = 0;
  for (int code = 0; code < 256; ++code) {
    const float x = f8e4m3_to_f32(static_cast<uint8_t>(code));
    if (std::isnan(x)) {
      CHECK((code & 0x7f) == 0x7f);
      continue;
    }
    ++finite;
    INFO("code " << code << " = " << x);
    CHECK(f32_to_f8e4m3(x) == code);
  }
  CHECK(finite == 254);
  CHECK(f8e4m3_to_f32(0x7e) == 448.0f);
  CHECK(f8e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));  // the smallest subnormal
  CHECK(f8e4m3_to_f32(0x38) == 1.0f);
  CHECK(f32_to_f8e4m3(1000.0f) == 0x7e);               // saturates
  CHECK(f32_to_f8e4m3(1.0625f) == 0x38);               // halfway between 1 and 1.125: the even code
  CHECK(f32_to_f8e4m3(1.1875f) == 0x3a);               // halfway between 1.125 and 1.25: the even code
}

TEST_CASE("E4M3: values between the codes round to the nearest, ties to the even code") {
  // Against a search over every finite code, on values spread over the whole range and the points
  // halfway between neighbouring codes (and just beside them).
  const auto nearest = [](float x) {
    int best = 0;
    for (int code = 1; code <= 0x7e; ++code) {
      const float d = std::fabs(f8e4m3_to_f32(static_cast<uint8_t>(code)) - std::fabs(x));
      const float d_best = std::fabs(f8e4m3_to_f32(static_cast<uint8_t>(best)) - std::fabs(x));
      if (d < d_best || (d == d_best && code % 2 == 0)) best = code;
    }
    return static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0) | best);
  };
  std::vector<float> xs;
  for (int code = 0; code < 0x7e; ++code) {
    const float lo = f8e4m3_to_f32(static_cast<uint8_t>(code)), hi = f8e4m3_to_f32(static_cast<uint8_t>(code + 1));
    const float mid = (lo + hi) / 2;
    for (const float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f), lo + (hi - lo) / 8}) {
      xs.push_back(x);
      xs.push_back(-x);
    }
  }
  for (float x = 1e-5f; x < 440.0f; x *= 1.01f) xs.push_back(x);
  for (const float x : xs) {
    INFO("x = " << x);
    CHECK(f32_to_f8e4m3(x) == nearest(x));
  }
}
