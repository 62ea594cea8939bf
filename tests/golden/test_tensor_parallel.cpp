// Tensor parallelism without GPUs: the CPU reference backend with 2 and 4 simulated ranks (threads,
// weight slices, the CPU collectives at the same call sites as NCCL; DeepSeek-V2's MLA heads and
// routed experts split over the ranks) against the same model on one rank — prompt logits within 1e-5 of max|logit| and the greedy tokens identical, on the golden
// fixtures' weights and on random weights — plus the sizes a binary was not built for, and a rank
// that fails while the others wait in a collective.
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <stdexcept>

#include "generated/tiny-deepseek-v2/model.hpp"
#include "generated/tiny-llama/model.hpp"
#include "generated/tiny-qwen3/model.hpp"
#include "generated/tiny-smollm2/model.hpp"
#include "runtime/core/error.hpp"
#include "runtime/engine/backend.hpp"
#include "runtime/engine/rank_threads.hpp"
#include "runtime/model/tensor_source.hpp"
#include "runtime/parallel/cpu_collective.hpp"
#include "tests/golden/golden_fixture.hpp"

using namespace kiln;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Every fixture prompt on `ranks` simulated ranks against one rank, from `origin`'s weights.
void check_ranks(const ModelDef& model, const WeightOrigin& origin, int32_t ranks) {
  const golden::Fixture fixture = golden::load_fixture(model.info.name);
  const auto one = make_ref_backend(model, origin, BackendOptions{});
  const auto group = make_tensor_parallel_backend(model, ranks, false, origin, BackendOptions{});
  CHECK(group->kv_pages() == one->kv_pages());
  const int64_t V = model.info.vocab_size;
  for (size_t i = 0; i < fixture.prompts.size(); ++i) {
    const golden::Prompt& p = fixture.prompts[i];
    const golden::Run base = golden::run_prompt(model, *one, p);
    const golden::Run split = golden::run_prompt(model, *group, p);
    const golden::LogitsComparison c = golden::compare_logits(base.prompt_logits, split.prompt_logits, V, 1e-5);
    INFO(model.info.name << " on " << ranks << " ranks, prompt " << i << ": worst logit difference " << c.worst
                         << " × max|logit|, first row over 1e-5: " << c.first_bad_row);
    CHECK(c.first_bad_row == -1);
    CHECK(split.tokens == base.tokens);
  }
}

// The fixtures with tensor-parallel builds.
const std::vector<const ModelDef*>& split_models() {
  static const std::vector<const ModelDef*> models = {&models::tiny_llama::model_def(), &models::tiny_qwen3::model_def(),
                                                      &models::tiny_deepseek_v2::model_def()};
  return models;
}

}  // namespace

TEST_CASE("2 and 4 simulated ranks equal one rank on the golden fixtures' weights") {
  for (const ModelDef* model : split_models()) {
    const auto source = open_safetensors_source(golden::load_fixture(model->info.name).dir);
    for (int32_t ranks : {2, 4}) check_ranks(*model, WeightOrigin{source.get(), 0}, ranks);
  }
}

TEST_CASE("2 and 4 simulated ranks equal one rank on random weights (each rank's slices of the same tensors)") {
  for (const ModelDef* model : split_models()) {
    for (int32_t ranks : {2, 4}) check_ranks(*model, WeightOrigin{nullptr, 11}, ranks);
  }
}

TEST_CASE("simulated ranks serving through a small KV pool: every request as it is alone") {
  BackendOptions options;
  options.kv_pages = 40;  // tiny-qwen3's pages hold 5 tokens: preemptions
  const ModelDef& model = models::tiny_qwen3::model_def();
  const auto group = make_tensor_parallel_backend(model, 2, false, WeightOrigin{nullptr, 5}, options);
  const golden::ServingComparison c = golden::serve_together_and_alone(model, *group);
  CHECK(c.preemptions > 0);
  CHECK(c.identical == c.requests);
}

TEST_CASE("DeepSeek-V2 on simulated ranks serving through a small KV pool: every request as it is alone") {
  BackendOptions options;
  options.kv_pages = 12;  // pages of 16 tokens: preemptions
  options.swap_space_bytes = 1 << 20;  // each rank swaps its latent cache pages out and back
  const ModelDef& model = models::tiny_deepseek_v2::model_def();
  const auto group = make_tensor_parallel_backend(model, 4, false, WeightOrigin{nullptr, 5}, options);
  CHECK(group->swap_pages() > 0);
  const golden::ServingComparison c = golden::serve_together_and_alone(model, *group);
  CHECK(c.preemptions > 0);
  CHECK(c.swapped_out > 0);
  CHECK(c.identical == c.requests);
}

TEST_CASE("a rank count the binary was not built for is refused naming the sizes built") {
  const WeightOrigin random{nullptr, 1};
  std::string m = error_of([&] { make_tensor_parallel_backend(models::tiny_llama::model_def(), 3, false, random, {}); });
  INFO(m);
  CHECK(m.find("--tensor-parallel-size 3") != std::string::npos);
  CHECK(m.find("built for 1, 2, 4") != std::string::npos);
  CHECK(m.find("build.tensor_parallel") != std::string::npos);
  m = error_of([&] { make_tensor_parallel_backend(models::tiny_smollm2::model_def(), 2, false, random, {}); });
  INFO(m);
  CHECK(m.find("built for 1 (") != std::string::npos);
}

TEST_CASE("a rank that fails while the others wait in a collective stops them all with its error") {
  CpuCollectiveGroup group(3);
  RankThreads threads(3, [&](const std::string& why) { group.abort(why); });
  std::vector<float> x(3 * 16, 1.0f);
  // Rank 1 fails before its all-reduce; ranks 0 and 2 would wait for it forever without the abort.
  auto run = std::async(std::launch::async, [&] {
    return error_of([&] {
      threads.run_all([&](int32_t r) {
        if (r == 1) throw std::runtime_error("out of memory loading its slices");
        group.rank(r).all_reduce(&x[r * 16], &x[r * 16], 16, false, nullptr);
      });
    });
  });
  REQUIRE(run.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  const std::string m = run.get();
  INFO(m);
  CHECK(m.find("tensor-parallel rank 1") != std::string::npos);
  CHECK(m.find("out of memory loading its slices") != std::string::npos);
}
