// Chat rendering against the models' Jinja chat templates as transformers renders them
// (tests/tokenizer/gen/gen_chat_expectations.py).
#include <catch2/catch.hpp>

#include "runtime/tokenizer/chat_template.hpp"
#include "tests/tokenizer/tokenizer_test_util.hpp"

using namespace kiln;

TEST_CASE("render_chat reproduces the HF chat templates with add_generation_prompt") {
  const auto expected = test::read_json(test::tokenizer_test_dir() + "/fixtures/chat_expected.json");
  REQUIRE(expected.at("cases").size() >= 30);
  for (const auto& item : expected.at("cases")) {
    ChatOptions options;
    if (item.value("default_system", false)) options.default_system = std::string(kSmolLM2DefaultSystem);
    if (item.contains("date_string")) options.date_string = item.at("date_string").get<std::string>();
    options.enable_thinking = item.value("enable_thinking", true);
    const ChatFormat format = parse_chat_format(item.at("format").get<std::string>());
    const std::string system = item.at("system").get<std::string>();
    const std::string user = item.at("user").get<std::string>();
    INFO(item.at("template").get<std::string>() << " system: \"" << system << "\" user: \"" << user << "\"");
    CHECK(render_chat(format, system, user, options) == item.at("expected").get<std::string>());
  }
}

TEST_CASE("chat format names and BOS placement") {
  CHECK(parse_chat_format("llama3") == ChatFormat::llama3);
  CHECK(chat_format_name(ChatFormat::deepseek) == "deepseek");
  CHECK_THROWS_WITH(parse_chat_format("vicuna"), Catch::Contains("expected chatml, llama3 or deepseek"));
  CHECK(chat_renders_bos(ChatFormat::llama3));
  CHECK(chat_renders_bos(ChatFormat::deepseek));
  CHECK_FALSE(chat_renders_bos(ChatFormat::chatml));
  // Invalid UTF-8 in a message is repaired rather than passed on.
  CHECK(render_chat(ChatFormat::chatml, "", "a\xFF") ==
        "<|im_start|>user\na\xEF\xBF\xBD<|im_end|>\n<|im_start|>assistant\n");
}
