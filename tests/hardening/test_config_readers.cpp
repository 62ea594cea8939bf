// Issue 13: kilnc's config readers are strict. A repeated key is an error (defect 6: YAML kept
// the first value, HF config.json the last), nesting is bounded, and numbers that do not fit the
// field are errors, each naming the file and the key.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "codegen/architecture_fields.hpp"
#include "codegen/config_load.hpp"
#include "runtime/core/error.hpp"
#include "tests/support/temp_dir.hpp"

using namespace kiln::codegen;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const std::string kTinyLlama = read(std::string(KILN_SOURCE_DIR) + "/configs/tiny-llama.yaml");
const std::string kHfConfig = read(std::string(KILN_SOURCE_DIR) + "/tests/golden/tiny-llama/config.json");

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

// The one-line error of loading `text` as config<ext>; fails the test when it loads.
std::string error_of(const std::string& text, const std::string& ext) {
  static const kiln::test::TempDir dir("kiln-config-strict");
  static int n = 0;
  const std::string path = dir.write(std::to_string(++n) + "/config" + ext, text);
  try {
    load_config(path);
  } catch (const kiln::Error& e) {
    const std::string message = e.what();
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
    return message;
  }
  FAIL("accepted:\n" << text);
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("kiln YAML: a repeated key is an error naming the key, at any level") {
  std::string m = error_of(replaced(kTinyLlama, "  hidden_size: 64\n", "  hidden_size: 64\n  hidden_size: 128\n"), ".yaml");
  INFO(m);
  CHECK(contains(m, "hidden_size"));
  CHECK(contains(m, "repeated"));
  m = error_of(replaced(kTinyLlama, "name: tiny-llama\n", "name: tiny-llama\nname: other\n"), ".yaml");
  CHECK(contains(m, "'name'"));
  m = error_of(replaced(kTinyLlama, "    factor: 8.0\n", "    factor: 8.0\n    factor: 4.0\n"), ".yaml");
  CHECK(contains(m, "factor"));
  // Flow mappings too.
  m = error_of(replaced(kTinyLlama, "  gpu_archs: [sm_90a]", "  gpu_archs: [sm_90a]\nextra: {a: 1, a: 2}"), ".yaml");
  CHECK(contains(m, "'extra.a'"));
}

TEST_CASE("HF config.json: a repeated key is an error naming the key") {
  std::string m = error_of(replaced(kHfConfig, "\"hidden_size\": 64,", "\"hidden_size\": 64, \"hidden_size\": 128,"), ".json");
  INFO(m);
  CHECK(contains(m, "duplicate"));
  CHECK(contains(m, "hidden_size"));
  m = error_of(replaced(kHfConfig, "\"rope_type\": \"llama3\"", "\"rope_type\": \"llama3\", \"rope_type\": \"default\""),
               ".json");
  CHECK(contains(m, "rope_type"));
}

TEST_CASE("config readers: deep nesting is an error, not a stack overflow") {
  std::string deep_json;
  for (int i = 0; i < 100000; ++i) deep_json += "[";
  for (int i = 0; i < 100000; ++i) deep_json += "]";
  CHECK(contains(error_of(replaced(kHfConfig, "\"use_cache\": true", "\"use_cache\": " + deep_json), ".json"), "nested"));

  std::string deep_yaml;
  for (int i = 0; i < 100000; ++i) deep_yaml += "[";
  for (int i = 0; i < 100000; ++i) deep_yaml += "]";
  error_of(replaced(kTinyLlama, "name: tiny-llama", "name: " + deep_yaml), ".yaml");
  std::string deep_map;
  for (int i = 0; i < 100000; ++i) deep_map += "{a: ";
  for (int i = 0; i < 100000; ++i) deep_map += "}";
  error_of(replaced(kTinyLlama, "name: tiny-llama", "name: " + deep_map), ".yaml");
}

TEST_CASE("config readers: numbers that do not fit are errors, not wrapped or rounded") {
  CHECK(contains(error_of(replaced(kHfConfig, "\"hidden_size\": 64", "\"hidden_size\": 18446744073709551616"), ".json"),
                 "hidden_size"));
  CHECK(contains(error_of(replaced(kHfConfig, "\"hidden_size\": 64", "\"hidden_size\": 9223372036854775808"), ".json"),
                 "hidden_size"));
  CHECK(contains(error_of(replaced(kHfConfig, "\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": 1e999"), ".json"), "JSON"));
  CHECK(contains(error_of(replaced(kHfConfig, "\"vocab_size\": 512", "\"vocab_size\": 4294967808"), ".json"),
                 "vocab_size"));
  CHECK(contains(error_of(replaced(kTinyLlama, "vocab_size: 512", "vocab_size: 4294967808"), ".yaml"), "vocab_size"));
  CHECK(contains(error_of(replaced(kTinyLlama, "vocab_size: 512", "vocab_size: 99999999999999999999999"), ".yaml"),
                 "vocab_size"));
  CHECK(contains(error_of(replaced(kTinyLlama, "rms_norm_eps: 1.0e-5", "rms_norm_eps: 1e999"), ".yaml"), "rms_norm_eps"));
}

// Defect 8 compares a model directory's config.json with the config its binary came from, through
// architecture_fields. The two readers must agree: each tiny model's YAML and the HF config.json
// its golden fixtures were made from describe the same architecture.
TEST_CASE("a kiln YAML and the HF config.json of the same model give the same architecture fields") {
  for (const char* name : {"tiny-llama", "tiny-qwen3", "tiny-smollm2", "tiny-deepseek-v2", "tiny-deepseek-v2-lite"}) {
    INFO(name);
    const auto yaml = architecture_fields(load_config(std::string(KILN_SOURCE_DIR) + "/configs/" + name + ".yaml"));
    const auto hf = architecture_fields(read_hf_architecture(std::string(KILN_SOURCE_DIR) + "/tests/golden/" + name + "/config.json"));
    REQUIRE(yaml.size() == hf.size());
    for (size_t i = 0; i < yaml.size(); ++i) {
      INFO(yaml[i].name << ": " << yaml[i].value << " vs " << hf[i].name << ": " << hf[i].value);
      CHECK(yaml[i].name == hf[i].name);
      CHECK(same_value(yaml[i], hf[i]));
    }
  }
  // Reals agree within fp32 rounding, not beyond.
  CHECK(same_value({"rms_norm_eps", "1e-05", true}, {"rms_norm_eps", "9.999999747378752e-06", true}));
  CHECK_FALSE(same_value({"rms_norm_eps", "1e-05", true}, {"rms_norm_eps", "1e-06", true}));
  CHECK_FALSE(same_value({"hidden_size", "64", false}, {"hidden_size", "64.0", false}));
}
