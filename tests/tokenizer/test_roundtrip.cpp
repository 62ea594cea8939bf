// Round trip and streaming on seeded random Unicode text, for every tokenizer under test.
#include <catch2/catch.hpp>

#include <random>

#include "runtime/tokenizer/stream_decoder.hpp"
#include "runtime/tokenizer/unicode_nfc.hpp"
#include "tests/tokenizer/tokenizer_test_util.hpp"

using namespace kiln;

namespace {

struct Named {
  std::string name;
  const Tokenizer* tokenizer;
  bool nfc;  // the tokenizer normalizes to NFC, so decode gives NFC(s)
};

std::vector<Named> all_tokenizers() {
  std::vector<Named> out;
  for (const auto& name : test::vector_names()) out.push_back({"gguf " + name, &test::gguf_tokenizer(name), false});
  for (const auto& name : test::fixture_names()) {
    out.push_back({"tokenizer.json " + name, &test::fixture_tokenizer(name), name == "qwen3"});
  }
  return out;
}

}  // namespace

TEST_CASE("decode(encode(s)) == s for random Unicode strings") {
  const auto strings = test::random_unicode_strings(300, 12345);
  for (const Named& t : all_tokenizers()) {
    size_t matched = 0;
    for (const std::string& text : strings) {
      const std::string expected = t.nfc ? to_nfc(text) : text;
      const std::string decoded = t.tokenizer->decode(t.tokenizer->encode(text));
      INFO(t.name << " input: \"" << text << "\"");
      CHECK(decoded == expected);
      matched += decoded == expected;
    }
    CHECK(matched == strings.size());
  }
}

TEST_CASE("streaming random strings: every chunk is valid UTF-8 and the chunks join to decode()") {
  const auto strings = test::random_unicode_strings(60, 777);
  for (const Named& t : all_tokenizers()) {
    for (const std::string& text : strings) {
      const auto ids = t.tokenizer->encode(text);
      for (size_t prefix = 0; prefix <= ids.size(); ++prefix) {
        StreamDecoder stream(*t.tokenizer);
        std::string joined;
        bool valid = true;
        for (size_t i = 0; i < prefix; ++i) {
          const std::string chunk = stream.push(ids[i]);
          valid = valid && utf8::is_valid(chunk);
          joined += chunk;
        }
        joined += stream.flush();
        INFO(t.name << " input: \"" << text << "\", prefix " << prefix);
        CHECK(valid);
        CHECK(joined == t.tokenizer->decode(std::span<const int32_t>(ids.data(), prefix)));
      }
    }
  }
}

TEST_CASE("a stream holds back a split character and flushes an incomplete one as U+FFFD") {
  const Tokenizer& gpt2 = test::gguf_tokenizer("gpt-2");
  // "🚀" is four bytes; GPT-2 spells it with byte tokens that each carry part of it.
  const auto ids = gpt2.encode("\xF0\x9F\x9A\x80");
  REQUIRE(ids.size() > 1);
  StreamDecoder stream(gpt2);
  for (size_t i = 0; i + 1 < ids.size(); ++i) CHECK(stream.push(ids[i]).empty());
  CHECK(stream.holding());
  CHECK(stream.push(ids.back()) == "\xF0\x9F\x9A\x80");
  CHECK(stream.flush().empty());

  StreamDecoder truncated(gpt2);
  CHECK(truncated.push(ids.front()).empty());
  CHECK(truncated.flush() == utf8::kReplacement);
  CHECK(gpt2.decode(std::span<const int32_t>(ids.data(), 1)) == utf8::kReplacement);
}

TEST_CASE("a SentencePiece stream drops the dummy-prefix space only at the start of a sequence") {
  const Tokenizer& spm = test::gguf_tokenizer("llama-spm");
  const auto ids = spm.encode("Hello world");
  std::string start, continued;
  StreamDecoder from_start(spm), after_prompt(spm, false, /*at_sequence_start=*/false);
  for (const int32_t id : ids) {
    start += from_start.push(id);
    continued += after_prompt.push(id);
  }
  CHECK(start == "Hello world");
  CHECK(continued == " Hello world");
  // Skipped special tokens do not count as the start: HF strips after dropping them.
  StreamDecoder skipping(spm, /*skip_special=*/true);
  std::string skipped = skipping.push(1);
  for (const int32_t id : ids) skipped += skipping.push(id);
  CHECK(skipped == "Hello world");
}

TEST_CASE("streaming arbitrary token ids (as a model may emit them) stays valid UTF-8") {
  std::mt19937 rng(31337);
  for (const Named& t : all_tokenizers()) {
    const uint32_t vocab = static_cast<uint32_t>(t.tokenizer->vocab_size());
    for (int round = 0; round < 200; ++round) {
      std::vector<int32_t> ids(1 + rng() % 20);
      // Low ids are byte tokens in most vocabularies: mix them in to produce broken sequences.
      for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 2 ? rng() % std::min<uint32_t>(vocab, 300) : rng() % vocab);
      for (const bool skip_special : {false, true}) {
        StreamDecoder stream(*t.tokenizer, skip_special);
        std::string joined;
        bool valid = true;
        for (const int32_t id : ids) {
          const std::string chunk = stream.push(id);
          valid = valid && utf8::is_valid(chunk);
          joined += chunk;
        }
        joined += stream.flush();
        const std::string decoded = t.tokenizer->decode(ids, skip_special);
        INFO(t.name << " round " << round);
        CHECK(valid);
        CHECK(utf8::is_valid(decoded));
        CHECK(joined == decoded);
      }
    }
  }
}
