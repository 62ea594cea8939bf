// GGUF loading for the pre-tokenizer names we have no llama.cpp vocab files for (llama-bpe, qwen2,
// smollm): each tokenizer.json fixture is rewritten as GGUF metadata, the way llama.cpp's
// converter does, and must give the ids HF tokenizers gave for the fixture.
#include <catch2/catch.hpp>

#include "tests/tokenizer/tokenizer_test_util.hpp"

using namespace kiln;

namespace {

test::GgufBuilder gguf_from_fixture(const std::string& name, const std::string& pre) {
  const auto json = test::read_json(test::fixture_dir(name) + "/tokenizer.json");
  std::map<int32_t, std::pair<std::string, int32_t>> tokens;  // id -> (text, GGUF token type)
  for (const auto& [text, id] : json.at("model").at("vocab").items()) tokens[id.get<int32_t>()] = {text, 1};
  for (const auto& added : json.at("added_tokens")) {
    tokens[added.at("id").get<int32_t>()] = {added.at("content").get<std::string>(),
                                             added.at("special").get<bool>() ? 3 : 4};
  }
  std::vector<std::string> texts;
  std::vector<int32_t> types;
  for (const auto& [id, token] : tokens) {
    REQUIRE(id == static_cast<int32_t>(texts.size()));  // dense ids
    texts.push_back(token.first);
    types.push_back(token.second);
  }
  std::vector<std::string> merges;
  for (const auto& merge : json.at("model").at("merges")) {
    merges.push_back(merge.is_string() ? merge.get<std::string>()
                                       : merge[0].get<std::string>() + " " + merge[1].get<std::string>());
  }
  test::GgufBuilder image;
  image.kv_string("tokenizer.ggml.model", "gpt2");
  image.kv_string("tokenizer.ggml.pre", pre);
  image.kv_string_array("tokenizer.ggml.tokens", texts);
  image.kv_int32_array("tokenizer.ggml.token_type", types);
  image.kv_string_array("tokenizer.ggml.merges", merges);
  return image;
}

}  // namespace

TEST_CASE("GGUF pre-tokenizer names reproduce their tokenizer.json pipelines") {
  struct Case {
    const char* fixture;
    const char* pre;
  };
  for (const Case& c : {Case{"llama3", "llama-bpe"}, Case{"qwen3", "qwen2"}, Case{"smollm2", "smollm"},
                        Case{"deepseek", "deepseek-llm"}}) {
    const Tokenizer tokenizer =
        test::load_gguf_tokenizer(gguf_from_fixture(c.fixture, c.pre), std::string(c.fixture) + ".gguf");
    const auto expected = test::read_json(test::fixture_dir(c.fixture) + "/expected.json");
    size_t matched = 0;
    for (const auto& item : expected.at("cases")) {
      const std::string text = item.at("text").get<std::string>();
      const auto ids = test::ids_of(item.at("ids"));
      INFO(c.pre << " input: \"" << text << "\"");
      CHECK(tokenizer.encode(text) == ids);
      CHECK(tokenizer.encode(text, false, false) == test::ids_of(item.at("ids_special_as_text")));
      CHECK(tokenizer.decode(ids) == item.at("decoded").get<std::string>());
      matched += tokenizer.encode(text) == ids;
    }
    CHECK(matched == expected.at("cases").size());
  }
}

TEST_CASE("GGUF BOS/EOS keys, add_bos_token and the end-of-generation tokens found by text") {
  auto image = gguf_from_fixture("llama3", "llama-bpe");
  const Tokenizer defaults = test::load_gguf_tokenizer(image, "llama3.gguf");
  CHECK(defaults.add_bos_by_default() == false);  // llama-bpe adds BOS, but no BOS id is set: see below
  image.kv_u32("tokenizer.ggml.bos_token_id", 1195);
  image.kv_u32("tokenizer.ggml.eos_token_id", 1196);
  image.kv_u32("tokenizer.ggml.eom_token_id", 1199);
  const Tokenizer llama3 = test::load_gguf_tokenizer(image, "llama3.gguf");
  CHECK(llama3.bos_id() == 1195);
  CHECK(llama3.add_bos_by_default());  // llama.cpp's default for llama-bpe
  // EOS, then EOM, then <|eot_id|> found by its text.
  CHECK(llama3.eos_ids() == std::vector<int32_t>{1196, 1199, llama3.token_id("<|eot_id|>")});
  image.kv_bool("tokenizer.ggml.add_bos_token", false);
  CHECK_FALSE(test::load_gguf_tokenizer(image, "llama3.gguf").add_bos_by_default());
  image.kv_u32("tokenizer.ggml.eot_token_id", 99999);
  CHECK_THROWS_WITH(test::load_gguf_tokenizer(image, "llama3.gguf"),
                    Catch::Contains("tokenizer.ggml.eot_token_id is 99999, outside"));
}
