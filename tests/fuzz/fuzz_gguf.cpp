// libFuzzer: a GGUF file image, then what kiln reads from one: the Llama hyperparameters and
// tensors in HF layout (dequantized), and the tokenizer.
#include "runtime/tokenizer/tokenizer.hpp"
#include "runtime/weights/gguf.hpp"
#include "runtime/weights/gguf_model.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kiln::fuzz::expect_kiln_errors_only;
  expect_kiln_errors_only([&] {
    const kiln::GgufFile gguf =
        kiln::GgufFile::parse(std::span(reinterpret_cast<const std::byte*>(data), size), "fuzz.gguf");
    expect_kiln_errors_only([&] {
      const kiln::GgufHyperparams hp = kiln::read_gguf_hyperparams(gguf);
      for (const kiln::HfTensorSource& t : kiln::gguf_hf_tensors(gguf, hp)) {
        if (t.numel() > (1 << 16)) continue;
        std::vector<float> values(static_cast<size_t>(t.numel()));
        t.read_f32(values);
      }
    });
    expect_kiln_errors_only([&] {
      const kiln::Tokenizer tokenizer = kiln::Tokenizer::from_gguf(gguf);
      tokenizer.decode(tokenizer.encode("Hello, world! <s> 123 \xC3\xB1"));
    });
  });
  return 0;
}
