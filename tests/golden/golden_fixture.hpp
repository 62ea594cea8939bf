// Reading the golden fixtures (tools/golden/make_golden.py) and running a model on them, shared by
// the CPU test (test_golden.cpp) and the GPU test (test_golden_gpu.cpp).
#pragma once

#include <string>
#include <vector>

#include "runtime/engine/backend.hpp"
#include "runtime/model/model_def.hpp"

namespace kiln::golden {

struct Prompt {
  std::vector<int32_t> ids;
  std::vector<float> logits;         // [ids.size(), vocab], HF fp32
  std::vector<int32_t> greedy;       // HF's greedy continuation
  std::vector<float> greedy_logits;  // [greedy.size(), vocab]: HF's logits at each greedy step
};

struct Fixture {
  std::string dir;                   // tests/golden/<model>: config.json, model.safetensors
  std::vector<Prompt> prompts;
};

Fixture load_fixture(const std::string& model_name);

struct Run {
  std::vector<float> prompt_logits;  // [prompt, vocab]
  std::vector<int32_t> tokens;       // greedy continuation, as many as the fixture's
};

// Prompt logits and greedy tokens of `model` on `backend`, through the engine.
Run run_prompt(const ModelDef& model, Backend& backend, const Prompt& prompt);

// The first row whose largest |difference| exceeds tolerance × max|golden|, or -1, and the worst
// relative difference over all rows.
struct LogitsComparison {
  int64_t first_bad_row = -1;
  double worst = 0;  // max |a - b| / max |golden|
};
LogitsComparison compare_logits(const std::vector<float>& golden, const std::vector<float>& ours, int64_t vocab,
                                double tolerance);

// Serving through a KV pool of `backend` too small for all requests at once (so sequences get
// preempted, re-admitted and replay their tokens): 24 greedy requests of random prompts, each of
// which must produce exactly what it produces alone. Prints per-request differences; returns how
// many were identical and how many preemptions the shared run had.
struct ServingComparison {
  int requests = 0;
  int identical = 0;
  int64_t preemptions = 0;
  int64_t swapped_out = 0;  // preemptions that swapped the KV to host memory (the backend's swap space)
};
// max_decode_slowdown: EngineOptions' (prompt chunks beside decodes capped from measured times).
// num_requests requests of 10-60 prompt tokens and 10-max_new_tokens outputs (fewer and shorter
// under compute-sanitizer, where every decode step takes seconds).
ServingComparison serve_together_and_alone(const ModelDef& model, Backend& backend, double max_decode_slowdown = 0,
                                           int num_requests = 24, int max_new_tokens = 60);

// vLLM's top-5 rule on one prompt: kiln's greedy tokens (`run`) equal HF's, or where they first
// differ, each side's token is in the other's top-5 at that step (kiln's logits there are recomputed
// on the prompt plus HF's tokens before it).
struct GreedyVerdict {
  size_t agreeing = 0;  // leading tokens equal to HF's
  bool ok = false;
  std::string text;     // "identical", "first differ at 5 (kiln 17, HF 3): each in the other's top-5", ...
};
GreedyVerdict top5_rule(const ModelDef& model, Backend& backend, const Prompt& prompt, const Run& run);

// A prompt whose oracle is kiln's CPU reference backend rather than HF (a file HF cannot read, a
// quantized GGUF): `reference`'s own prompt logits for `ids`, its greedy continuation of `tokens`
// tokens, and its logits at each greedy step, as a fixture Prompt for top5_rule.
Prompt reference_prompt(const ModelDef& model, Backend& reference, const std::vector<int32_t>& ids, size_t tokens);

// Indices of the k largest values of row `row` of `logits`.
std::vector<int32_t> top_k(const std::vector<float>& logits, int64_t vocab, int64_t row, int k);

}  // namespace kiln::golden
