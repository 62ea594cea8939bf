// tokenizer.json fixtures (small vocabularies with each family's real pipeline), checked against
// the ids and decodes HF tokenizers produced for them (tests/tokenizer/gen/make_fixtures.py).
#include <catch2/catch.hpp>

#include <algorithm>

#include "runtime/tokenizer/chat_template.hpp"
#include "tests/tokenizer/tokenizer_test_util.hpp"

using namespace kiln;
using kiln::test::fixture_tokenizer;

TEST_CASE("tokenizer.json fixtures encode and decode exactly as HF tokenizers") {
  for (const std::string& name : test::fixture_names()) {
    const Tokenizer& tokenizer = fixture_tokenizer(name);
    const auto expected = test::read_json(test::fixture_dir(name) + "/expected.json");
    REQUIRE(expected.at("cases").size() > 200);
    for (const auto& item : expected.at("cases")) {
      const std::string text = item.at("text").get<std::string>();
      const auto ids = test::ids_of(item.at("ids"));
      INFO(name << " input: \"" << text << "\"");
      CHECK(tokenizer.encode(text) == ids);
      CHECK(tokenizer.encode(text, tokenizer.add_bos_by_default()) == test::ids_of(item.at("ids_with_special")));
      CHECK(tokenizer.encode(text, false, /*parse_special=*/false) == test::ids_of(item.at("ids_special_as_text")));
      CHECK(tokenizer.decode(ids) == item.at("decoded").get<std::string>());
      CHECK(tokenizer.decode(ids, /*skip_special=*/true) == item.at("decoded_skip_special").get<std::string>());
    }
  }
}

TEST_CASE("BOS, EOS and the add-BOS policy come from the post-processor and config files") {
  const auto id = [](const Tokenizer& t, const char* text) { return t.token_id(text); };

  const Tokenizer& llama3 = fixture_tokenizer("llama3");
  CHECK(llama3.bos_id() == id(llama3, "<|begin_of_text|>"));
  CHECK(llama3.add_bos_by_default());  // TemplateProcessing puts <|begin_of_text|> first
  // generation_config.json's list first, then tokenizer_config.json's eos_token (already there).
  CHECK(llama3.eos_ids() ==
        std::vector<int32_t>{id(llama3, "<|end_of_text|>"), id(llama3, "<|eom_id|>"), id(llama3, "<|eot_id|>")});

  const Tokenizer& qwen3 = fixture_tokenizer("qwen3");
  CHECK_FALSE(qwen3.add_bos_by_default());
  CHECK(qwen3.bos_id() == id(qwen3, "<|endoftext|>"));  // bos_token is null; generation_config names it
  CHECK(qwen3.eos_ids() == std::vector<int32_t>{id(qwen3, "<|im_end|>"), id(qwen3, "<|endoftext|>")});
  CHECK(qwen3.token_kind(id(qwen3, "<think>")) == TokenKind::user_defined);
  CHECK(qwen3.token_kind(id(qwen3, "<|im_end|>")) == TokenKind::control);

  const Tokenizer& deepseek = fixture_tokenizer("deepseek");
  CHECK(deepseek.add_bos_by_default());
  CHECK(deepseek.bos_id() == id(deepseek, "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"));
  CHECK(deepseek.eos_ids() ==
        std::vector<int32_t>{id(deepseek, "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>")});

  const Tokenizer& smollm2 = fixture_tokenizer("smollm2");
  CHECK_FALSE(smollm2.add_bos_by_default());
  CHECK(smollm2.bos_id() == id(smollm2, "<|im_start|>"));
  CHECK(smollm2.eos_ids() == std::vector<int32_t>{id(smollm2, "<|im_end|>")});

  const Tokenizer& gpt2 = fixture_tokenizer("gpt2");
  CHECK_FALSE(gpt2.add_bos_by_default());
  CHECK(gpt2.bos_id() == 0);  // config.json only
  CHECK(gpt2.eos_ids() == std::vector<int32_t>{0});

  const Tokenizer& llama2 = fixture_tokenizer("llama2_json");
  CHECK(llama2.add_bos_by_default());
  CHECK(llama2.bos_id() == 1);
  CHECK(llama2.eos_ids() == std::vector<int32_t>{2});
  CHECK(llama2.strips_leading_space());
}

TEST_CASE("ignore_merges emits a word that is itself a token whole (Llama 3)") {
  const Tokenizer& llama3 = fixture_tokenizer("llama3");
  const int32_t whole = llama3.token_id("\xC4\xA0zzqx");  // "Ġzzqx": no merge sequence builds it
  REQUIRE(whole >= 0);
  CHECK(llama3.encode(" zzqx") == std::vector<int32_t>{whole});
  CHECK(llama3.encode(" zzqx zzqx") == std::vector<int32_t>{whole, whole});
}

TEST_CASE("the chat format is guessed from a tokenizer's special tokens") {
  CHECK(guess_chat_format(fixture_tokenizer("llama3")) == ChatFormat::llama3);
  CHECK(guess_chat_format(fixture_tokenizer("qwen3")) == ChatFormat::chatml);
  CHECK(guess_chat_format(fixture_tokenizer("smollm2")) == ChatFormat::chatml);
  CHECK(guess_chat_format(fixture_tokenizer("deepseek")) == ChatFormat::deepseek);
  CHECK_FALSE(guess_chat_format(fixture_tokenizer("gpt2")).has_value());
  CHECK_FALSE(guess_chat_format(test::gguf_tokenizer("llama-spm")).has_value());
  CHECK(guess_chat_format(test::gguf_tokenizer("deepseek-llm")) == ChatFormat::deepseek);
}

TEST_CASE("rendered chats encode with the BOS once and stop at the end-of-turn tokens") {
  struct Case {
    const char* fixture;
    ChatFormat format;
    const char* end_of_turn;
  };
  for (const Case& c : {Case{"llama3", ChatFormat::llama3, "<|eot_id|>"}, Case{"qwen3", ChatFormat::chatml, "<|im_end|>"},
                        Case{"deepseek", ChatFormat::deepseek,
                             "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"}}) {
    const Tokenizer& tokenizer = fixture_tokenizer(c.fixture);
    const std::string prompt = render_chat(c.format, "Be brief.", "Hi there");
    const auto ids = tokenizer.encode(prompt);  // no add_bos: the template wrote it
    INFO(c.fixture);
    if (chat_renders_bos(c.format)) {
      CHECK(ids.front() == tokenizer.bos_id());
      CHECK(std::count(ids.begin(), ids.end(), tokenizer.bos_id()) == 1);
    }
    const auto stops = chat_stop_ids(c.format, tokenizer);
    REQUIRE_FALSE(stops.empty());
    CHECK(stops.front() == tokenizer.token_id(c.end_of_turn));
    for (const int32_t eos : tokenizer.eos_ids()) CHECK(std::find(stops.begin(), stops.end(), eos) != stops.end());
    CHECK(tokenizer.decode(ids) == prompt);
  }
}
