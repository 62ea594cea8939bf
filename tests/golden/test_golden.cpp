// CPU golden tests: each tiny model, on the CPU reference backend, against HF transformers
// (fixtures by tools/golden/make_golden.py): prompt logits within 1e-3 × max|logit|, and the 16
// greedy tokens identical.
#include <catch2/catch.hpp>

#include "generated/tiny-deepseek-v2-lite/model.hpp"
#include "generated/tiny-deepseek-v2/model.hpp"
#include "generated/tiny-llama/model.hpp"
#include "generated/tiny-qwen3/model.hpp"
#include "generated/tiny-smollm2/model.hpp"
#include "runtime/engine/backend.hpp"
#include "runtime/model/tensor_source.hpp"
#include "tests/golden/golden_fixture.hpp"

using namespace kiln;

namespace {

void check_model(const ModelDef& model) {
  const golden::Fixture fixture = golden::load_fixture(model.info.name);
  const auto source = open_safetensors_source(fixture.dir);
  const auto backend = make_ref_backend(model, WeightOrigin{source.get(), 0}, BackendOptions{});
  const int64_t V = model.info.vocab_size;
  for (size_t i = 0; i < fixture.prompts.size(); ++i) {
    const golden::Prompt& p = fixture.prompts[i];
    const golden::Run run = golden::run_prompt(model, *backend, p);
    const golden::LogitsComparison c = golden::compare_logits(p.logits, run.prompt_logits, V, 1e-3);
    INFO(model.info.name << " prompt " << i << " (" << p.ids.size() << " tokens): worst logit difference "
                         << c.worst << " × max|logit|, first row over 1e-3: " << c.first_bad_row);
    CHECK(c.first_bad_row == -1);
    size_t diverge = 0;
    while (diverge < p.greedy.size() && diverge < run.tokens.size() && p.greedy[diverge] == run.tokens[diverge]) ++diverge;
    INFO("greedy tokens first differ at generated position " << diverge);
    CHECK(run.tokens == p.greedy);
  }
}

}  // namespace

TEST_CASE("tiny-llama (llama3 rope scaling, tied embeddings) matches HF on the CPU backend") {
  check_model(models::tiny_llama::model_def());
}

TEST_CASE("tiny-qwen3 (per-head q/k norm, page size 5) matches HF on the CPU backend") {
  check_model(models::tiny_qwen3::model_def());
}

TEST_CASE("tiny-smollm2 (SmolLM2-shaped: 9 / 3 heads) matches HF on the CPU backend") {
  check_model(models::tiny_smollm2::model_def());
}

TEST_CASE("tiny-deepseek-v2 (MLA with q_lora, group-limited routing, scaled weights, YaRN, fused experts) matches HF") {
  check_model(models::tiny_deepseek_v2::model_def());
}

TEST_CASE("tiny-deepseek-v2-lite (MLA without q_lora, greedy routing, renormalized weights, per-expert tensors) matches HF") {
  check_model(models::tiny_deepseek_v2_lite::model_def());
}

TEST_CASE("requests served together through a small KV pool equal each alone on the CPU backend") {
  // tiny-qwen3 has pages of 5 tokens. 40 pages: preemptions; 20 pages (100 tokens): fewer than some
  // requests need at all, so those end at the pool's context limit, alone and together alike.
  // Preempted requests recompute (no swap space), swap their KV to host memory and back (room for
  // 200 pages), or some of each (room for 12: a preemption whose pages do not fit recomputes).
  const ModelDef& model = models::tiny_qwen3::model_def();
  const int64_t page_bytes = int64_t{model.info.page_size} * model.info.kv_elems_per_token * model.info.num_layers * 4;
  for (int32_t pages : {40, 20}) {
    for (int64_t swap_pages : {0, 200, 12}) {
      BackendOptions options;
      options.kv_pages = pages;
      options.swap_space_bytes = swap_pages * page_bytes;
      const auto backend = make_ref_backend(model, WeightOrigin{nullptr, 5}, options);
      REQUIRE(backend->swap_pages() == swap_pages);
      const golden::ServingComparison c = golden::serve_together_and_alone(model, *backend);
      INFO(pages << " KV pages, " << swap_pages << " swap pages: " << c.preemptions << " preemptions, " << c.swapped_out
                 << " swapped out");
      CHECK(c.preemptions > 0);
      CHECK(c.identical == c.requests);
      if (swap_pages == 0) CHECK(c.swapped_out == 0);
      if (swap_pages == 200) CHECK(c.swapped_out > 0);
      if (swap_pages == 12) CHECK((c.swapped_out > 0 && c.swapped_out < c.preemptions));
    }
  }
}

TEST_CASE("prompt chunks capped beside decodes from measured step times leave every request's tokens unchanged") {
  BackendOptions options;
  options.kv_pages = 400;
  const ModelDef& model = models::tiny_qwen3::model_def();
  const auto backend = make_ref_backend(model, WeightOrigin{nullptr, 5}, options);
  const golden::ServingComparison c = golden::serve_together_and_alone(model, *backend, 1.2);
  CHECK(c.identical == c.requests);
}
