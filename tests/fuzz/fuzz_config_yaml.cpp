// libFuzzer: a kilnc YAML config, read and validated as `kilnc CONFIG` does.
#include "codegen/config_load.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kiln::fuzz::write_input("config.yaml", kiln::fuzz::as_text(data, size));
  kiln::fuzz::expect_kiln_errors_only([&] { kiln::codegen::load_config(path); });
  return 0;
}
