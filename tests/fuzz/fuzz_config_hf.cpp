// libFuzzer: an HF config.json, imported and validated as `kilnc config.json` does.
#include "codegen/config_load.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kiln::fuzz::write_input("config.json", kiln::fuzz::as_text(data, size));
  kiln::fuzz::expect_kiln_errors_only([&] {
    std::vector<std::string> warnings;
    kiln::codegen::load_config(path, {}, &warnings);
  });
  return 0;
}
