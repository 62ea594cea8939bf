// libFuzzer: a GGUF file image, then what kiln reads from one: the hyperparameters and tensors in
// HF layout (llama, qwen3, deepseek2; dequantized), every small tensor dequantized as stored, and
// the tokenizer.
#include "runtime/tokenizer/tokenizer.hpp"
#include "runtime/weights/dequant.hpp"
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
    for (const kiln::GgufTensor& t : gguf.tensors()) {  // each block decoder, whatever the names
      expect_kiln_errors_only([&] {
        int64_t n = 1;
        for (const int64_t d : t.ne) n *= d;
        if (!kiln::can_dequantize(t.type) || n > (1 << 16)) return;
        std::vector<float> values(static_cast<size_t>(n));
        kiln::dequantize(t.type, t.bytes, values);
      });
    }
    expect_kiln_errors_only([&] {
      const kiln::Tokenizer tokenizer = kiln::Tokenizer::from_gguf(gguf);
      tokenizer.decode(tokenizer.encode("Hello, world! <s> 123 \xC3\xB1"));
    });
  });
  return 0;
}
