// llama.cpp's tokenizer test vectors (GGUF vocabularies with HF-produced ids): exact ids, round
// trip and streaming decode for each input.
#include <catch2/catch.hpp>

#include <algorithm>

#include "runtime/tokenizer/stream_decoder.hpp"
#include "runtime/tokenizer/vector_file.hpp"
#include "tests/tokenizer/tokenizer_test_util.hpp"

using namespace kiln;
using kiln::test::gguf_tokenizer;

TEST_CASE("GGUF test vectors encode to exactly the expected ids") {
  for (const std::string& name : test::vector_names()) {
    const Tokenizer& tokenizer = gguf_tokenizer(name);
    const auto cases = read_tokenizer_vectors(test::vector_gguf(name));
    REQUIRE(cases.size() == 46);
    size_t matched = 0;
    for (const auto& item : cases) {
      INFO(name << " input: \"" << item.text << "\"");
      CHECK(tokenizer.encode(item.text) == item.ids);
      matched += tokenizer.encode(item.text) == item.ids;
    }
    CHECK(matched == cases.size());
  }
}

TEST_CASE("GGUF metadata gives the special tokens and BOS policy llama.cpp uses") {
  const Tokenizer& gpt2 = gguf_tokenizer("gpt-2");
  CHECK(gpt2.vocab_size() == 50257);
  CHECK(gpt2.bos_id() == 50256);
  CHECK(gpt2.eos_ids() == std::vector<int32_t>{50256});
  CHECK_FALSE(gpt2.add_bos_by_default());
  CHECK(gpt2.token_kind(50256) == TokenKind::control);
  CHECK(gpt2.token_text(15496) == "Hello");

  const Tokenizer& deepseek = gguf_tokenizer("deepseek-llm");
  CHECK(deepseek.bos_id() == 100000);
  CHECK(deepseek.eos_ids() == std::vector<int32_t>{100001});
  CHECK(deepseek.add_bos_by_default());
  CHECK(deepseek.token_kind(100002) == TokenKind::user_defined);  // "ø", matched before BPE

  const Tokenizer& spm = gguf_tokenizer("llama-spm");
  CHECK(spm.bos_id() == 1);
  CHECK(spm.eos_ids() == std::vector<int32_t>{2});
  CHECK(spm.add_bos_by_default());
  CHECK(spm.strips_leading_space());
  CHECK(spm.token_kind(0) == TokenKind::unknown);
  CHECK(spm.token_kind(3) == TokenKind::byte);
}

TEST_CASE("add_bos and parse_special behave as llama.cpp's add_special / parse_special") {
  const Tokenizer& spm = gguf_tokenizer("llama-spm");
  const auto plain = spm.encode("Hello world");
  auto with_bos = spm.encode("Hello world", /*add_bos=*/true);
  REQUIRE(with_bos.size() == plain.size() + 1);
  CHECK(with_bos.front() == 1);
  CHECK(std::vector<int32_t>(with_bos.begin() + 1, with_bos.end()) == plain);
  // "<s>" in the text is the BOS control token only when special tokens are parsed; the text
  // after a special token gets SentencePiece's dummy prefix space again.
  CHECK(spm.encode("<s>Hello") == std::vector<int32_t>{1, 15043});
  CHECK(spm.encode("<s>Hello", false, /*parse_special=*/false) != std::vector<int32_t>{1, 15043});
  CHECK(spm.decode(spm.encode("<s>Hello"), /*skip_special=*/true) == "Hello");
  CHECK(spm.decode(spm.encode("<s>Hello")) == "<s> Hello");

  const Tokenizer& gpt2 = gguf_tokenizer("gpt-2");
  CHECK(gpt2.encode("a<|endoftext|>b") == std::vector<int32_t>{64, 50256, 65});
  const auto as_text = gpt2.encode("a<|endoftext|>b", false, /*parse_special=*/false);
  CHECK(std::find(as_text.begin(), as_text.end(), 50256) == as_text.end());
  CHECK(gpt2.decode(as_text) == "a<|endoftext|>b");
}

TEST_CASE("decode(encode(s)) == s for every test-vector input") {
  for (const std::string& name : test::vector_names()) {
    const Tokenizer& tokenizer = gguf_tokenizer(name);
    for (const auto& item : read_tokenizer_vectors(test::vector_gguf(name))) {
      INFO(name << " input: \"" << item.text << "\"");
      CHECK(tokenizer.decode(tokenizer.encode(item.text)) == item.text);
    }
  }
}

TEST_CASE("streaming decode of every prefix is valid UTF-8 and joins to the full decode") {
  for (const std::string& name : test::vector_names()) {
    const Tokenizer& tokenizer = gguf_tokenizer(name);
    for (const auto& item : read_tokenizer_vectors(test::vector_gguf(name))) {
      const auto ids = tokenizer.encode(item.text);
      for (size_t prefix = 0; prefix <= ids.size(); ++prefix) {
        StreamDecoder stream(tokenizer);
        std::string joined;
        for (size_t i = 0; i < prefix; ++i) {
          const std::string chunk = stream.push(ids[i]);
          CHECK(utf8::is_valid(chunk));
          joined += chunk;
        }
        const std::string tail = stream.flush();
        CHECK(utf8::is_valid(tail));
        joined += tail;
        const std::span<const int32_t> head(ids.data(), prefix);
        INFO(name << " input: \"" << item.text << "\", prefix " << prefix);
        CHECK(joined == tokenizer.decode(head));
      }
    }
  }
}
