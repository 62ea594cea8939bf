// libFuzzer: a whole safetensors file image (8-byte header length, JSON header, data).
#include "runtime/weights/safetensors.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::expect_kiln_errors_only([&] {
    std::map<std::string, std::string> metadata;
    const auto tensors = kiln::parse_safetensors(std::span(reinterpret_cast<const std::byte*>(data), size),
                                                 "fuzz.safetensors", &metadata);
    // What a loader does next: read every tensor's values.
    for (const kiln::TensorView& t : tensors) {
      if (t.numel() > (1 << 16) || (t.dtype != kiln::DType::F32 && t.dtype != kiln::DType::F16 &&
                                    t.dtype != kiln::DType::BF16 && t.dtype != kiln::DType::F64)) {
        continue;
      }
      std::vector<float> values(static_cast<size_t>(t.numel()));
      kiln::convert_to_f32(t, values);
    }
  });
  return 0;
}
