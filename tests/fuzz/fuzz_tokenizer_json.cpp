// libFuzzer: a tokenizer.json, loaded as a model directory's would be, then used: encode a fixed
// text (special tokens parsed and not) and decode the ids back.
#include "runtime/tokenizer/tokenizer.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kiln::fuzz::write_input("tokenizer.json", kiln::fuzz::as_text(data, size));
  kiln::fuzz::expect_kiln_errors_only([&] {
    const kiln::Tokenizer tokenizer = kiln::Tokenizer::from_tokenizer_json(path);
    for (const bool special : {true, false}) {
      const auto ids = tokenizer.encode("Hello, world!  <|im_end|> 123 \xC3\xB1 \xE6\x97\xA5\xE6\x9C\xAC \xFF", true, special);
      tokenizer.decode(ids);
      tokenizer.decode(ids, /*skip_special=*/true);
    }
    tokenizer.describe();
  });
  return 0;
}
