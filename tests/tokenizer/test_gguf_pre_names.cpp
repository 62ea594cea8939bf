// GGUF `tokenizer.ggml.pre` names. Each tokenizer.json fixture is rewritten as GGUF metadata, the
// way llama.cpp's converter does, and must give the ids HF tokenizers gave for the fixture; and
// every name kiln accepts splits a sample text as its family's pattern does.
#include <catch2/catch.hpp>

#include "runtime/tokenizer/pre_tokenizer.hpp"
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
  // jina-v5-nano and f2llmv2 name the Llama 3 and Qwen pipelines (f2llmv2 with Qwen's NFC).
  for (const Case& c : {Case{"llama3", "llama-bpe"}, Case{"llama3", "jina-v5-nano"}, Case{"qwen3", "qwen2"},
                        Case{"qwen3", "f2llmv2"}, Case{"smollm2", "smollm"}, Case{"deepseek", "deepseek-llm"}}) {
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

TEST_CASE("GGUF add-BOS defaults follow llama.cpp's per name, not ignore_merges") {
  for (const auto& [pre, adds_bos] : {std::pair{"chameleon", true}, std::pair{"tekken", false},
                                      std::pair{"jina-v5-nano", true}, std::pair{"glm4", false}}) {
    auto image = gguf_from_fixture("llama3", pre);
    image.kv_u32("tokenizer.ggml.bos_token_id", 1195);
    INFO(pre);
    CHECK(test::load_gguf_tokenizer(image, "test.gguf").add_bos_by_default() == adds_bos);
  }
}

namespace {

// A family of names: llama.cpp's settings for them and sample texts with the pieces their splits
// give. The pieces were derived by hand from each pattern and confirmed with HF tokenizers
// (Oniguruma) running the tokenizer.json patterns as Split(Isolated) steps. Each text shows what
// sets its pattern apart (contractions and their case, digit grouping, where punctuation goes,
// scripts split off first).
struct Family {
  std::vector<std::string> names;
  bool ignore_merges, nfc, add_bos;
  std::vector<std::pair<std::string, std::vector<std::string>>> cases;  // text -> pieces
};

const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
        "modern-bert", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4", "jina-v1-en", "jina-v2-code",
        "roberta-bpe"},
       false, false, false,
       {{"I'm  fine!\n123", {"I", "'m", " ", " fine", "!", "\n", "123"}}, {"I'M 12", {"I", "'", "M", " 12"}}}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
       true, false, true,
       {{"I'M 12345 ok", {"I", "'M", " ", "123", "45", " ok"}}}},
      {{"dbrx", "smaug-bpe", "glm4", "chatglm-bpe"}, false, false, false,
       {{"I'M 12345 ok", {"I", "'M", " ", "123", "45", " ok"}}}},
      // Whitespace runs cut into powers of two (6 = 4 + 1, and the last space joins the word).
      {{"jais-2"}, false, false, false, {{"a      b", {"a", "    ", " ", " b"}}}},
      {{"deepseek-llm"}, false, false, false,
       {{"Hello, \u4E16\u754C 123\n", {"Hello", ",", " ", "\u4E16\u754C", " ", "123", "\n"}}}},
      {{"deepseek-coder"}, false, false, false,
       {{"x = foo(12);\n\u4E2D\u6587", {"x", " =", " foo", "(", "1", "2", ");", "\n", "\u4E2D\u6587"}}}},
      // An ASCII punctuation mark joins the letters after it; digits by three; CJK and kana runs.
      {{"deepseek-v3", "hunyuan-dense", "joyai-llm"}, false, false, false,
       {{"Hello,World 12345 \u65E5\u672C\u8A9E\u3067\u3059",
         {"Hello", ",World", " ", "123", "45", " ", "\u65E5\u672C\u8A9E\u3067\u3059"}}}},
      // Hangul and fullwidth punctuation split off first; a word breaks before an upper-case letter.
      {{"youtu"}, true, false, false,
       {{"\uC548\uB155\uD558\uC138\uC694\uFF0CHelloWorld's 42",
         {"\uC548\uB155\uD558\uC138\uC694", "\uFF0C", "Hello", "World's", " ", "4", "2"}}}},
      {{"falcon"}, false, false, false, {{"x+=1234 (ok)", {"x", "+=", "123", "4", " ", "(", "ok", ")"}}}},
      {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b", "mellum2"}, false, false,
       false, {{"I'M 12", {"I", "'", "M", " ", "1", "2"}}}},
      {{"qwen2", "deepseek-r1-qwen", "f2llmv2"}, false, true, false, {{"I'M 12", {"I", "'M", " ", "1", "2"}}}},
      {{"stablelm2", "megrez", "hunyuan", "kormo", "solar-open", "grok-2"}, false, false, false,
       {{"I'M 12", {"I", "'M", " ", "1", "2"}}, {"a12!\n\nb", {"a", "1", "2", "!\n\n", "b"}}}},
      // A combining mark stays in its word (Qwen2's pattern would start a new piece with it).
      {{"qwen35"}, false, true, false, {{"cafe\u0301!! 12", {"cafe\u0301", "!!", " ", "1", "2"}}}},
      // Lines first, so the "!" no longer takes the newlines after it (see Qwen2's split above).
      {{"laguna"}, false, false, false, {{"a12!\n\nb", {"a", "1", "2", "!", "\n\n", "b"}}}},
      {{"bloom", "gpt3-finnish", "poro-chat"}, false, false, false,
       {{"Hello, world! (ok) a.b", {"Hello", ",", " world", "! (", "ok", ")", " a", ".", "b"}}}},
      {{"viking"}, false, false, false, {{"Hello, 2024!", {"Hello", ",", " ", "2", "0", "2", "4", "!"}}}},
      {{"tekken"}, true, false, false,
       {{"HelloWorld 123 don't", {"Hello", "World", " ", "1", "2", "3", " don", "'t"}}}},
      {{"chameleon"}, false, false, true,
       {{"<sentinel:12>IMGIMGABZ  x1,y",
         {"<", "sentinel", ":", "1", "2", ">", "IMGIMGABZ", "  ", "x", "1", ",", "y"}}}},
      {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, false, false, false,
       {{"HelloWorld don't 12345", {"Hello", "World", " don't", " ", "123", "45"}}}},
      {{"granite-embed-multi-97m"}, true, false, false,
       {{"HelloWorld don't 12345", {"Hello", "World", " don't", " ", "123", "45"}}}},
      // Thousands from the right, but only where a word ends: not before a combining mark.
      {{"tiny_aya", "cohere2moe"}, false, false, false,
       {{"1234567 x", {"1", "234", "567", " x"}}, {"1234\u0301", {"123", "4", "\u0301"}}}},
      {{"bailingmoe", "bailingmoe2", "llada-moe"}, false, false, false,
       {{"I'M 123\n\nok", {"I", "'M", " ", "1", "2", "3", "\n\n", "ok"}}}},
      {{"seed-coder"}, false, false, false, {{"a!\n\nb 12", {"a", "!", "\n\n", "b", " ", "1", "2"}}}},
      // Words joined by single spaces stay one piece.
      {{"exaone-moe"}, false, false, false,
       {{"hello world cafe\u0301 12", {"hello world cafe\u0301", " ", "1", "2"}}}},
      {{"minicpm5"}, true, false, false, {{"12345 ab", {"123", "45", " ab"}}}},
  };
  return table;
}

}  // namespace

TEST_CASE("every GGUF pre-tokenizer name kiln accepts splits as its family's pattern does") {
  size_t names = 0;
  for (const Family& family : families()) {
    for (const std::string& name : family.names) {
      INFO("tokenizer.ggml.pre " << name);
      PreTokenizer::GgufSettings settings;
      const PreTokenizer pre = PreTokenizer::for_gguf_name(name, "test.gguf", settings);
      CHECK(settings.ignore_merges == family.ignore_merges);
      CHECK(settings.nfc == family.nfc);
      CHECK(settings.add_bos == family.add_bos);
      for (const auto& [text, expected] : family.cases) {
        INFO("text \"" << text << "\"");
        Pieces pieces;
        pre.split(text, pieces, /*at_input_start=*/true);
        std::vector<std::string> got;
        for (size_t i = 0; i < pieces.size(); ++i) got.emplace_back(pieces[i]);
        CHECK(got == expected);
      }
      ++names;
    }
  }
  CHECK(names == 79);  // llama.cpp's 87 names for a 'gpt2' vocabulary but the 8 refused below
}

TEST_CASE("GGUF pre-tokenizer names kiln refuses say why") {
  struct Refused {
    const char* name;
    const char* reason;
  };
  for (const Refused& r : {Refused{"default", "fallback"}, Refused{"gemma4", "SentencePiece-style"},
                           Refused{"granite-embed-multi-311m", "SentencePiece-style"},
                           Refused{"sarvam-moe", "SentencePiece-style"}, Refused{"whitespace", "raw UTF-8"},
                           Refused{"kimi-k2", "custom code"}, Refused{"afmoe", "custom code"},
                           Refused{"superbpe", "empty strings"}}) {
    PreTokenizer::GgufSettings settings;
    const std::string refusal = std::string("model.gguf: tokenizer.ggml.pre '") + r.name + "' is not supported: ";
    CHECK_THROWS_WITH(PreTokenizer::for_gguf_name(r.name, "model.gguf", settings),
                      Catch::Contains(refusal) && Catch::Contains(r.reason));
  }
  PreTokenizer::GgufSettings settings;
  CHECK_THROWS_WITH(PreTokenizer::for_gguf_name("made-up", "model.gguf", settings),
                    Catch::Contains("'made-up' is not supported; supported byte-level pre-tokenizers: gpt-2, phi-2,") &&
                        Catch::Contains("minicpm5"));
}
