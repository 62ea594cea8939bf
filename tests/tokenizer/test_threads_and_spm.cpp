// Concurrent use of one tokenizer, and SentencePiece's unknown-token path.
#include <catch2/catch.hpp>

#include <thread>

#include "tests/tokenizer/tokenizer_test_util.hpp"

using namespace kiln;

TEST_CASE("one tokenizer encodes from several threads with the same results") {
  for (const std::string& name : {std::string("gpt-2"), std::string("llama-spm")}) {
    const Tokenizer& tokenizer = test::gguf_tokenizer(name);
    const auto strings = test::random_unicode_strings(400, 4242);
    std::vector<std::vector<int32_t>> serial;
    tokenizer.set_cache_enabled(false);
    for (const auto& s : strings) serial.push_back(tokenizer.encode(s));
    tokenizer.set_cache_enabled(true);
    std::vector<std::vector<std::vector<int32_t>>> results(4);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < results.size(); ++t) {
      threads.emplace_back([&, t] {
        for (int round = 0; round < 3; ++round) {
          results[t].clear();
          for (const auto& s : strings) results[t].push_back(tokenizer.encode(s));
        }
      });
    }
    for (auto& thread : threads) thread.join();
    for (const auto& result : results) CHECK(result == serial);
  }
}

TEST_CASE("SentencePiece without byte tokens falls back to the unknown token") {
  test::GgufBuilder image;
  image.kv_string("tokenizer.ggml.model", "llama");
  image.kv_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xE2\x96\x81" "a", "a", "\xE2\x96\x81"});
  image.kv_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -3});
  image.kv_int32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1});
  const Tokenizer tokenizer = test::load_gguf_tokenizer(image, "tiny-spm.gguf");
  // "▁a▁b": "b" is in no token and there are no <0xXX> tokens, so it becomes <unk>; a character
  // of several bytes becomes one <unk>.
  CHECK(tokenizer.encode("a b") == std::vector<int32_t>{3, 5, 0});
  CHECK(tokenizer.encode("a \xC3\xA9") == std::vector<int32_t>{3, 5, 0});
  CHECK(tokenizer.decode(std::vector<int32_t>{3, 5, 0}) == "a <unk>");
  CHECK(tokenizer.decode(std::vector<int32_t>{3, 5, 0}, /*skip_special=*/true) == "a ");
  CHECK(tokenizer.encode("<unk>a") == std::vector<int32_t>{0, 3});  // parsed as the special token

  image.kv_bool("tokenizer.ggml.add_space_prefix", false);
  const Tokenizer no_prefix = test::load_gguf_tokenizer(image, "tiny-spm.gguf");
  CHECK(no_prefix.encode("a") == std::vector<int32_t>{4});
  CHECK_FALSE(no_prefix.strips_leading_space());
}
