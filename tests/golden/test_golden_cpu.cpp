// Golden tests of the fast CPU backend (--backend cpu): each tiny model from its safetensors
// fixture (bf16 projection rows) against HF, and written as Q8_0 / Q4_0 / Q4_1 GGUF files (the
// file's blocks in the CPU layout) against the CPU reference on the same file, both under vLLM's
// top-5 rule; and serving under preemption equals each request alone (the backend's sums do not
// depend on what shares a step, so this holds bit for bit).
#include <catch2/catch.hpp>

#include <cstdio>
#include <map>

#include "generated/tiny-deepseek-v2-lite/model.hpp"
#include "generated/tiny-deepseek-v2/model.hpp"
#include "generated/tiny-llama/model.hpp"
#include "generated/tiny-qwen3/model.hpp"
#include "generated/tiny-smollm2/model.hpp"
#include "runtime/cpu/quant_dot.hpp"
#include "runtime/engine/backend.hpp"
#include "runtime/model/gguf_source.hpp"
#include "tests/golden/gguf_fixture.hpp"
#include "tests/golden/golden_fixture.hpp"

using namespace kiln;

namespace {

const ModelDef* const kModels[] = {&models::tiny_llama::model_def(), &models::tiny_qwen3::model_def(),
                                   &models::tiny_smollm2::model_def(), &models::tiny_deepseek_v2::model_def(),
                                   &models::tiny_deepseek_v2_lite::model_def()};

// Runs every prompt of `prompts` on `backend` and checks the top-5 rule against it.
void check_prompts(const ModelDef& model, Backend& backend, const std::vector<golden::Prompt>& prompts,
                   const std::string& what) {
  const int64_t V = model.info.vocab_size;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const golden::Prompt& p = prompts[i];
    const golden::Run run = golden::run_prompt(model, backend, p);
    const golden::LogitsComparison c = golden::compare_logits(p.logits, run.prompt_logits, V, 1e-3);
    const golden::GreedyVerdict g = golden::top5_rule(model, backend, p, run);
    std::printf("%-22s %s, prompt %zu: prompt logits max|diff| %.2e x max|logit|; greedy %zu/%zu %s -> %s\n",
                model.info.name, what.c_str(), i, c.worst, g.agreeing, p.greedy.size(), g.text.c_str(),
                g.ok ? "PASS" : "FAIL");
    INFO(model.info.name << " " << what << " prompt " << i << ": " << g.text);
    CHECK(g.ok);
  }
}

}  // namespace

TEST_CASE("every tiny model on the fast CPU backend agrees with HF under the top-5 rule", "[golden]") {
  std::printf("fast CPU kernels: %s\n", cpu::dot_isa());
  for (const ModelDef* m : kModels) {
    const golden::Fixture fixture = golden::load_fixture(m->info.name);
    const auto source = open_safetensors_source(fixture.dir);
    const auto backend = make_cpu_backend(*m, WeightOrigin{source.get(), 0}, BackendOptions{});
    CHECK(std::string(backend->name()) == "cpu");
    check_prompts(*m, *backend, fixture.prompts, "bf16 rows vs HF");
  }
}

// --quantize fp8 quantizes every matrix with one scale (quant_repack.hpp's quantize_fp8); the
// reference computes with those values, as the GPU's FP8 is tested against (test_golden_gpu, which
// also checks that these models' matrices are FP8; tiny-deepseek-v2-lite's rows of 48 values take
// none).
TEST_CASE("quantizing to FP8 (--quantize fp8) on the reference backend keeps HF's greedy tokens under the top-5 rule", "[golden]") {
  for (const ModelDef* m : {&models::tiny_llama::model_def(), &models::tiny_qwen3::model_def(),
                            &models::tiny_smollm2::model_def(), &models::tiny_deepseek_v2::model_def()}) {
    const golden::Fixture fixture = golden::load_fixture(m->info.name);
    const auto source = open_safetensors_source(fixture.dir);
    BackendOptions options;
    options.quantize = Quantize::fp8;
    const auto backend = make_ref_backend(*m, WeightOrigin{source.get(), 0}, options);
    check_prompts(*m, *backend, fixture.prompts, "--quantize fp8 (reference) vs HF");
  }
}

// kQ4_1 + 1 below: a Q4_0 file whose attn_v and ffn_up are Q8_0, so that qkv_proj and gate_up_proj
// are in two block formats (CpuMatrix::split).
TEST_CASE("GGUF files in Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and a mix run from their blocks on the fast CPU backend like the "
          "reference",
          "[golden]") {
  constexpr uint32_t kMix = golden::kQ4_1 + 1;
  for (const uint32_t variant : {golden::kQ8_0, golden::kQ4_0, golden::kQ4_1, golden::kQ5_0, golden::kQ5_1, kMix}) {
    for (const ModelDef* m : {&models::tiny_llama::model_def(), &models::tiny_qwen3::model_def(),
                              &models::tiny_deepseek_v2::model_def()}) {
      const golden::Fixture fixture = golden::load_fixture(m->info.name);
      const auto hf = open_safetensors_source(fixture.dir);
      const uint32_t type = variant == kMix ? golden::kQ4_0 : variant;
      const char* name = type == golden::kQ8_0   ? "Q8_0"
                         : type == golden::kQ4_0 ? "Q4_0"
                         : type == golden::kQ4_1 ? "Q4_1"
                         : type == golden::kQ5_0 ? "Q5_0"
                                                 : "Q5_1";
      const std::string origin = std::string(m->info.name) + "-" + name + (variant == kMix ? "+mix" : "") + ".gguf";
      const std::map<std::string, uint32_t> mix = {{"attn_v.weight", golden::kQ8_0}, {"ffn_up.weight", golden::kQ8_0}};
      const std::vector<std::byte> image =  // the file views it
          golden::fixture_as_gguf(*m, *hf, type, 1.0f, golden::KvB::split, variant == kMix ? mix : decltype(mix){});
      const auto gguf = open_gguf_source(std::make_shared<const GgufFile>(GgufFile::parse(image, origin)), m->info);
      const auto reference = make_ref_backend(*m, WeightOrigin{gguf.get(), 0}, BackendOptions{});
      const auto fast = make_cpu_backend(*m, WeightOrigin{gguf.get(), 0}, BackendOptions{});
      const BackendInfo& info = fast->info();
      INFO(origin << ": " << info.weight_formats);
      CHECK(info.weight_formats.find(std::string(name) + " for ") != std::string::npos);
      if (variant == kMix) CHECK(info.weight_formats.find("with rows in a second format") != std::string::npos);
      CHECK(info.decode_weight_bytes < m->info.decode_weight_bytes);
      std::vector<golden::Prompt> prompts;
      for (const golden::Prompt& p : fixture.prompts) {
        prompts.push_back(golden::reference_prompt(*m, *reference, p.ids, p.greedy.size()));
      }
      check_prompts(*m, *fast, prompts, std::string(name) + " GGUF vs the reference");
    }
  }
}

TEST_CASE("requests served together through a small KV pool equal each alone on the fast CPU backend", "[golden]") {
  // As test_golden's reference case: preemptions that recompute, and ones that swap.
  const ModelDef& model = models::tiny_qwen3::model_def();
  const int64_t page_bytes = int64_t{model.info.page_size} * model.info.kv_elems_per_token * model.info.num_layers * 4;
  for (const int64_t swap_pages : {0, 200}) {
    BackendOptions options;
    options.kv_pages = 20;
    options.swap_space_bytes = swap_pages * page_bytes;
    const auto backend = make_cpu_backend(model, WeightOrigin{nullptr, 5}, options);
    const golden::ServingComparison c = golden::serve_together_and_alone(model, *backend);
    INFO(swap_pages << " swap pages: " << c.preemptions << " preemptions, " << c.swapped_out << " swapped out");
    CHECK(c.preemptions > 0);
    CHECK(c.identical == c.requests);
  }
}
