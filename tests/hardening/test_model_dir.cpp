// Issue 13: model directories that contradict the binary (defect 8) or hold NaN/Inf (defect 10).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <catch2/catch.hpp>
#include <string>

#include "runtime/weights/safetensors.hpp"
#include "tests/hardening/hostile_cli.hpp"

using namespace kiln::test;
using nlohmann::json;

namespace fs = std::filesystem;

// Defect 8: the runtime never read the model directory's config.json; a directory whose config
// contradicts the binary loaded and ran when the tensor shapes fit.
TEST_CASE("a model directory whose config.json contradicts the binary is refused naming the field") {
  const TempDir dir("kiln-hostile");
  const std::string model = copy_tiny_llama_dir(dir);
  const std::string config_path = model + "/config.json";
  const std::string original = run_command("cat " + config_path).output;
  const auto with_config = [&](const std::string& text) {
    std::ofstream(config_path) << text;
    return tiny_llama("--model " + model + " --prompt-ids 5,6,7 --max-tokens 2 --temperature 0 -q");
  };
  REQUIRE(with_config(original).exit_code == 0);

  const auto edited = [&](const std::function<void(json&)>& edit) {
    json j = json::parse(original);
    edit(j);
    return j.dump(2);
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {edited([](json& j) { j["rope_parameters"]["rope_theta"] = 500000.0; }), "rope_theta"},
      {edited([](json& j) { j["rms_norm_eps"] = 1e-6; }), "rms_norm_eps"},
      {edited([](json& j) { j["model_type"] = "qwen3"; }), "model_type"},
      {edited([](json& j) { j["intermediate_size"] = 128; }), "intermediate_size"},
      {edited([](json& j) { j["max_position_embeddings"] = 4096; }), "max_position_embeddings"},
      {edited([](json& j) { j["rope_parameters"]["factor"] = 4.0; }), "factor"},
      {edited([](json& j) { j["hidden_act"] = "gelu"; }), "hidden_act"},
      {"{\"model_type\": \"llama\",", "JSON"},
      {"{\"model_type\": \"llama\", \"model_type\": \"llama\"}", "duplicate"},
  };
  for (const auto& [text, field] : cases) {
    const CommandResult r = with_config(text);
    INFO(text << "\n-> " << r.output);
    CHECK(r.exit_code == 1);
    CHECK(contains(r.output, "config.json"));
    CHECK(contains(r.output, field));
  }
  fs::remove(config_path);
  const CommandResult missing = tiny_llama("--model " + model + " --prompt-ids 5 --max-tokens 1");
  CHECK(missing.exit_code == 1);
  CHECK(contains(missing.output, "config.json"));
}

// Defect 10: NaN or infinite weights produced no tokens and no warning in text mode. The loader
// now names the tensor.
TEST_CASE("a checkpoint holding NaN or Inf is refused naming the tensor") {
  const TempDir dir("kiln-hostile");
  const std::string model = copy_tiny_llama_dir(dir);
  const std::string weights = model + "/model.safetensors";
  for (const uint16_t poison : {uint16_t{0x7FC0}, uint16_t{0xFF80}}) {  // bf16 NaN, -Inf
    {
      const kiln::SafetensorsFile original(std::string(KILN_SOURCE_DIR) + "/tests/golden/tiny-llama/model.safetensors");
      std::vector<std::vector<std::byte>> copies;
      std::vector<kiln::TensorToWrite> tensors;
      for (const kiln::TensorView& t : original.tensors()) {
        copies.emplace_back(t.bytes.begin(), t.bytes.end());
        if (t.name == "model.layers.1.mlp.down_proj.weight") {
          REQUIRE(t.dtype == kiln::DType::BF16);
          std::memcpy(copies.back().data() + 2 * 37, &poison, 2);
        }
        tensors.push_back({t.name, t.dtype, t.shape, copies.back()});
      }
      kiln::write_safetensors(weights + ".tmp", tensors, original.metadata());
    }
    fs::rename(weights + ".tmp", weights);
    const CommandResult r = tiny_llama("--model " + model + " --prompt-ids 5,6,7 --max-tokens 4");
    CHECK(r.exit_code == 1);
    CHECK(contains(r.output, "model.layers.1.mlp.down_proj.weight"));
    CHECK((contains(r.output, "NaN") || contains(r.output, "Inf")));
  }
}


// Tensor parallelism: a rank reads column slices of the row-parallel projections, so a checkpoint
// whose o_proj is narrower than the config says must be refused by name before any rank reads past
// it; and a rank count the binary was not built for is one line, not a crash.
TEST_CASE("tensor parallel: a mis-shaped row-parallel tensor and an unbuilt rank count are refused in one line") {
  const TempDir dir("kiln-hostile");
  const std::string model = copy_tiny_llama_dir(dir);
  const std::string weights = model + "/model.safetensors";
  const std::string narrowed = "model.layers.0.self_attn.o_proj.weight";
  {
    const kiln::SafetensorsFile original(std::string(KILN_SOURCE_DIR) + "/tests/golden/tiny-llama/model.safetensors");
    std::vector<std::vector<std::byte>> copies;
    std::vector<kiln::TensorToWrite> tensors;
    for (const kiln::TensorView& t : original.tensors()) {
      std::vector<int64_t> shape = t.shape;
      copies.emplace_back(t.bytes.begin(), t.bytes.end());
      if (t.name == narrowed) {  // [64, 64] -> [64, 62]: two columns short
        REQUIRE(shape.size() == 2);
        shape[1] -= 2;
        copies.back().resize(static_cast<size_t>(shape[0] * shape[1]) * 2);
      }
      tensors.push_back({t.name, t.dtype, shape, copies.back()});
    }
    kiln::write_safetensors(weights + ".tmp", tensors, original.metadata());
  }
  fs::rename(weights + ".tmp", weights);
  const CommandResult r = tiny_llama("--model " + model + " --tp 2 --prompt-ids 5,6,7 --max-tokens 2");
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, narrowed));
  CHECK(contains(r.output, "[64, 62]"));

  const CommandResult unbuilt = tiny_llama("--random-weights 1 --tp 3 --prompt-ids 5 --max-tokens 1");
  CHECK(unbuilt.exit_code == 1);
  CHECK(contains(unbuilt.output, "built for 1, 2, 4"));
}
