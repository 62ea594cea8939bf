#include "tests/golden/golden_fixture.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>

#include "runtime/core/error.hpp"
#include "runtime/engine/engine.hpp"
#include "runtime/weights/safetensors.hpp"

namespace kiln::golden {

namespace {

template <typename T>
std::vector<T> read(const SafetensorsFile& file, const std::string& name) {
  const TensorView* t = file.find(name);
  if (!t) fail(file.path(), ": no tensor ", name);
  std::vector<T> out(static_cast<size_t>(t->numel()));
  if (t->bytes.size() != out.size() * sizeof(T)) fail(file.path(), ": tensor ", name, " has an unexpected size");
  std::memcpy(out.data(), t->bytes.data(), t->bytes.size());
  return out;
}

}  // namespace

Fixture load_fixture(const std::string& model_name) {
  Fixture f;
  f.dir = std::string(KILN_SOURCE_DIR) + "/tests/golden/" + model_name;
  const SafetensorsFile file(f.dir + "/golden.safetensors");
  const int count = std::stoi(file.metadata().at("prompts"));
  for (int i = 0; i < count; ++i) {
    const std::string p = "prompt_" + std::to_string(i) + "_";
    f.prompts.push_back({read<int32_t>(file, p + "ids"), read<float>(file, p + "logits"), read<int32_t>(file, p + "greedy"),
                         read<float>(file, p + "greedy_logits")});
  }
  return f;
}

Run run_prompt(const ModelDef& model, Backend& backend, const Prompt& prompt) {
  Engine engine(model, backend, EngineOptions{});
  Request request;
  request.id = 1;
  request.prompt = prompt.ids;
  request.prompt_logits = true;
  request.params.temperature = 0.0f;
  request.params.max_tokens = static_cast<int32_t>(prompt.greedy.size());
  request.params.ignore_eos = true;  // the reference generates past EOS too
  engine.add(request);
  const std::vector<FinishedRequest> finished = engine.run();
  if (finished.size() != 1) fail("expected one finished request, got ", finished.size());
  return {finished.front().prompt_logits, finished.front().output_tokens};
}

LogitsComparison compare_logits(const std::vector<float>& golden, const std::vector<float>& ours, int64_t vocab,
                                double tolerance) {
  if (golden.size() != ours.size()) fail("logits sizes differ: golden ", golden.size(), ", ours ", ours.size());
  double max_abs = 0;
  for (float v : golden) max_abs = std::max(max_abs, static_cast<double>(std::fabs(v)));
  LogitsComparison c;
  for (size_t i = 0; i < golden.size(); ++i) {
    const double d = std::fabs(static_cast<double>(golden[i]) - ours[i]) / max_abs;
    if (std::isnan(ours[i])) {
      c.worst = INFINITY;
    } else {
      c.worst = std::max(c.worst, d);
    }
    if ((std::isnan(ours[i]) || d > tolerance) && c.first_bad_row < 0) c.first_bad_row = static_cast<int64_t>(i) / vocab;
  }
  return c;
}

std::vector<int32_t> top_k(const std::vector<float>& logits, int64_t vocab, int64_t row, int k) {
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  const float* r = logits.data() + row * vocab;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) { return r[a] > r[b]; });
  ids.resize(k);
  return ids;
}

Prompt reference_prompt(const ModelDef& model, Backend& reference, const std::vector<int32_t>& ids, size_t tokens) {
  const int64_t V = model.info.vocab_size;
  Prompt ref{ids, {}, std::vector<int32_t>(tokens), {}};
  const Run run = run_prompt(model, reference, ref);
  ref.logits = run.prompt_logits;
  ref.greedy = run.tokens;
  Prompt steps{ids, {}, {0}, {}};  // the prompt and the greedy tokens but the last, as one prompt
  steps.ids.insert(steps.ids.end(), ref.greedy.begin(), ref.greedy.end() - 1);
  const Run at_steps = run_prompt(model, reference, steps);
  ref.greedy_logits.assign(at_steps.prompt_logits.begin() + static_cast<std::ptrdiff_t>((ids.size() - 1) * V),
                           at_steps.prompt_logits.end());
  return ref;
}

GreedyVerdict top5_rule(const ModelDef& model, Backend& backend, const Prompt& p, const Run& run) {
  const auto contains = [](const std::vector<int32_t>& ids, int32_t id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  };
  const int64_t V = model.info.vocab_size;
  GreedyVerdict v;
  size_t& diverge = v.agreeing;
  while (diverge < p.greedy.size() && diverge < run.tokens.size() && p.greedy[diverge] == run.tokens[diverge]) ++diverge;
  v.ok = diverge == p.greedy.size();
  v.text = "identical";
  if (!v.ok && diverge == run.tokens.size()) {
    v.text = "kiln stopped after " + std::to_string(diverge) + " tokens";
  } else if (!v.ok) {
    Prompt extended = p;
    extended.ids.insert(extended.ids.end(), p.greedy.begin(), p.greedy.begin() + static_cast<std::ptrdiff_t>(diverge));
    extended.greedy.assign(1, 0);
    const Run at = run_prompt(model, backend, extended);
    const int64_t last = static_cast<int64_t>(extended.ids.size()) - 1;
    const bool ours_in_hf = contains(top_k(p.greedy_logits, V, static_cast<int64_t>(diverge), 5), run.tokens[diverge]);
    const bool hf_in_ours = contains(top_k(at.prompt_logits, V, last, 5), p.greedy[diverge]);
    v.ok = ours_in_hf && hf_in_ours;
    v.text = "first differ at " + std::to_string(diverge) + " (kiln " + std::to_string(run.tokens[diverge]) + ", HF " +
             std::to_string(p.greedy[diverge]) + "): " + (v.ok ? "each in the other's top-5" : "NOT in each other's top-5");
  }
  return v;
}

ServingComparison serve_together_and_alone(const ModelDef& model, Backend& backend, double max_decode_slowdown,
                                           int num_requests, int max_new_tokens) {
  std::mt19937 rng(17);
  std::vector<Request> requests;
  for (int i = 0; i < num_requests; ++i) {
    Request r;
    r.id = static_cast<RequestId>(i + 1);
    const int prompt = std::uniform_int_distribution<int>(10, 60)(rng);
    for (int t = 0; t < prompt; ++t) r.prompt.push_back(std::uniform_int_distribution<int>(3, model.info.vocab_size - 1)(rng));
    r.params.temperature = 0.0f;
    r.params.ignore_eos = true;
    r.params.max_tokens = std::uniform_int_distribution<int>(10, max_new_tokens)(rng);
    requests.push_back(r);
  }
  auto run = [&](int max_batch) {
    EngineOptions engine_options;
    engine_options.max_batch = max_batch;
    engine_options.max_decode_slowdown = max_decode_slowdown;
    Engine engine(model, backend, engine_options);
    for (const Request& r : requests) engine.add(r);
    std::map<RequestId, FinishedRequest> out;
    for (FinishedRequest& f : engine.run()) out[f.id] = std::move(f);
    return std::pair{out, engine.stats().scheduler};
  };
  const auto [together, stats] = run(8);
  const auto [alone, none] = run(1);
  ServingComparison c;
  c.requests = static_cast<int>(requests.size());
  c.preemptions = stats.preemptions;
  c.swapped_out = stats.swapped_out;
  for (const auto& [id, f] : together) {
    const FinishedRequest& a = alone.at(id);
    if (a.output_tokens == f.output_tokens && a.reason == f.reason) {
      ++c.identical;
      continue;
    }
    size_t at = 0;
    while (at < f.output_tokens.size() && at < a.output_tokens.size() && f.output_tokens[at] == a.output_tokens[at]) ++at;
    std::printf("  request %llu (prompt %d, %d preemptions, %d prompt tokens cached at admission): first differs "
                "at output token %zu of %zu (alone: %zu tokens)\n",
                static_cast<unsigned long long>(id), f.num_prompt_tokens, f.num_preemptions,
                f.num_cached_prompt_tokens, at, f.output_tokens.size(), a.output_tokens.size());
  }
  std::printf("%-22s serving, %d KV pages, %d swap pages: %d requests together (%lld preemptions, %lld swapped out) vs "
              "each alone: %d identical\n",
              model.info.name, backend.kv_pages(), backend.swap_pages(), c.requests, static_cast<long long>(c.preemptions),
              static_cast<long long>(c.swapped_out), c.identical);
  return c;
}

}  // namespace kiln::golden
