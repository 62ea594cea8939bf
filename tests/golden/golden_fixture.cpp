#include "tests/golden/golden_fixture.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

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

}  // namespace kiln::golden
