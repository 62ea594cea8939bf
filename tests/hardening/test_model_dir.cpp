// Issue 13: model directories that hold NaN/Inf (defect 10).
#include <cstring>
#include <filesystem>

#include <catch2/catch.hpp>
#include <string>

#include "runtime/weights/safetensors.hpp"
#include "tests/hardening/hostile_cli.hpp"

using namespace kiln::test;
namespace fs = std::filesystem;

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

