// vLLM's request fields that shape the prompt or the answer (runtime/server/openai_api.hpp), as the
// server parses them: truncate_prompt_tokens, add_special_tokens, continue_final_message,
// documents, return_tokens_as_token_ids; and the fields it does not do, refused by name.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "runtime/server/openai_api.hpp"
#include "tests/support/chatml_api_model.hpp"
#include "tests/support/chatml_tokenizer.hpp"
#include "tests/support/temp_dir.hpp"

using namespace kiln;
using nlohmann::json;

namespace {

// The test ChatML tokenizer with a BOS <s> (id 261) that its post-processor adds, as Llama's does.
json tokenizer_with_bos() {
  json t = test::chatml_tokenizer_json();
  t["added_tokens"].push_back({{"id", 261}, {"content", "<s>"}, {"special", true}, {"normalized", false}});
  t["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                         {"pair", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {261}}, {"tokens", {"<s>"}}}}}}};
  return t;
}

struct Served {
  test::TempDir dir{"kiln-openai-request"};
  Tokenizer tokenizer = Tokenizer::from_tokenizer_json(dir.write("tokenizer.json", tokenizer_with_bos().dump()));
  JinjaChatTemplate chat_template{
      "{% for d in documents | default([]) %}[doc: {{ d.title }}]\n{% endfor %}"
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "<s>", "<|endoftext|>", "a test template"};
  StructuredOutputs structured{tokenizer};
  ApiModel model = test::chatml_api_model(tokenizer, chat_template, &structured, 64);
};

std::string text_of(const Tokenizer& t, const std::vector<int32_t>& ids) { return t.decode(ids); }

std::string refused_param(const json& body, const ApiModel& m, bool chat) {
  try {
    chat ? parse_chat_request(body, m) : parse_completion_request(body, m);
  } catch (const ApiError& e) {
    return e.param;
  }
  return "";
}

}  // namespace

TEST_CASE("request fields: truncate_prompt_tokens keeps the prompt's last tokens") {
  Served s;
  ApiRequest r = parse_completion_request({{"prompt", "abcdefgh"}, {"truncate_prompt_tokens", 3}}, s.model);
  CHECK(r.prompts[0] == std::vector<int32_t>{'f', 'g', 'h'});
  CHECK(r.prompt_texts[0] == "fgh");  // what echo writes back
  r = parse_completion_request({{"prompt", "abc"}, {"truncate_prompt_tokens", -1}}, s.model);
  CHECK(r.prompts[0] == std::vector<int32_t>{261, 'a', 'b', 'c'});
  // Past the model's length, -1 keeps what it takes with room for a token, rather than refusing.
  r = parse_completion_request({{"prompt", std::string(100, 'x')}, {"truncate_prompt_tokens", -1}, {"max_tokens", 1}},
                               s.model);
  CHECK(r.prompts[0].size() == 63);
  CHECK(refused_param({{"prompt", "abc"}, {"truncate_prompt_tokens", 0}}, s.model, false) == "truncate_prompt_tokens");
  r = parse_chat_request({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"truncate_prompt_tokens", 5}}, s.model);
  CHECK(r.prompts[0].size() == 5);
}

TEST_CASE("request fields: add_special_tokens adds the BOS to a text prompt (completions: by default)") {
  Served s;
  CHECK(parse_completion_request({{"prompt", "ab"}}, s.model).prompts[0] == std::vector<int32_t>{261, 'a', 'b'});
  CHECK(parse_completion_request({{"prompt", "ab"}, {"add_special_tokens", false}}, s.model).prompts[0] ==
        std::vector<int32_t>{'a', 'b'});
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  const std::vector<int32_t> plain = parse_chat_request(chat, s.model).prompts[0];
  CHECK(plain.front() == 256);  // the template's text: <|im_start|>, no BOS
  json with_bos = chat;
  with_bos["add_special_tokens"] = true;
  const std::vector<int32_t> bos = parse_chat_request(with_bos, s.model).prompts[0];
  CHECK(bos.front() == 261);
  CHECK(std::vector<int32_t>(bos.begin() + 1, bos.end()) == plain);
}

TEST_CASE("request fields: continue_final_message ends the prompt inside the last message") {
  Served s;
  json body = {{"messages", {{{"role", "user"}, {"content", "Capital of France?"}},
                             {{"role", "assistant"}, {"content", "The capital is"}}}},
               {"continue_final_message", true}};
  const ApiRequest r = parse_chat_request(body, s.model);
  const std::string text = text_of(s.tokenizer, r.prompts[0]);
  CHECK(text.size() >= 14);
  CHECK(text.substr(text.size() - 14) == "The capital is");  // no <|im_end|>, no new turn
  // With a list of parts: the last text part.
  body["messages"][1]["content"] = json::array({{{"type", "text"}, {"text", "The capital"}}, {{"type", "text"}, {"text", " is"}}});
  body["add_generation_prompt"] = false;
  const std::string parts = text_of(s.tokenizer, parse_chat_request(body, s.model).prompts[0]);
  CHECK(parts.substr(parts.size() - 2) == "is");
  body["messages"][1]["content"] = "The capital is";
  body["add_generation_prompt"] = true;
  CHECK(refused_param(body, s.model, true) == "continue_final_message");
  body.erase("add_generation_prompt");
  body["messages"][1]["content"] = nullptr;
  CHECK(refused_param(body, s.model, true) == "messages");
}

TEST_CASE("request fields: documents reach the template, tokens can be named by id, and what is not done is refused") {
  Served s;
  json body = {{"messages", {{{"role", "user"}, {"content", "Summarize."}}}},
               {"documents", {{{"title", "Paris"}, {"text", "..."}}}}};
  CHECK(text_of(s.tokenizer, parse_chat_request(body, s.model).prompts[0]).find("[doc: Paris]") != std::string::npos);

  body = {{"prompt", "ab"}, {"logprobs", 1}, {"return_tokens_as_token_ids", true}};
  const ApiRequest r = parse_completion_request(body, s.model);
  ResponseBuilder builder(r, s.model);
  ChoiceText c;
  c.text = "a";
  c.token_ids = {'a'};
  c.logprobs = {-0.5f};
  c.top_logprobs = {{TokenLogprob{'a', -0.5f}}};
  c.finish_reason = "length";
  const json out = builder.response({c}, Usage{});
  CHECK(out["choices"][0]["logprobs"]["tokens"][0] == "token_id:97");
  CHECK(out["choices"][0]["logprobs"]["top_logprobs"][0].contains("token_id:97"));
  json chat_body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"logprobs", true}, {"top_logprobs", 1},
                    {"return_tokens_as_token_ids", true}};
  const ApiRequest chat = parse_chat_request(chat_body, s.model);
  ResponseBuilder chat_builder(chat, s.model);
  const json entry = chat_builder.response({c}, Usage{})["choices"][0]["logprobs"]["content"][0];
  CHECK(entry["token"] == "token_id:97");
  CHECK(entry["bytes"] == json::array({'t', 'o', 'k', 'e', 'n', '_', 'i', 'd', ':', '9', '7'}));  // vLLM: the name's bytes

  for (const char* field : {"structural_tag", "logits_processors", "chat_template"}) {
    json b = {{"prompt", "ab"}, {field, json::array({1})}};
    CHECK(refused_param(b, s.model, false) == field);
  }
  CHECK(refused_param({{"prompt", "ab"}, {"priority", 3}}, s.model, false) == "priority");
  // allowed_token_ids and bad_words reach the sampling parameters (the scheduler applies them).
  ApiRequest a = parse_completion_request({{"prompt", "ab"}, {"allowed_token_ids", {5, 7}}}, s.model);
  CHECK(a.params.allowed_token_ids == std::vector<int32_t>{5, 7});
  a = parse_completion_request({{"prompt", "ab"}, {"bad_words", {" cat", "x"}}}, s.model);
  // Byte tokens: " cat" is a different first token in more tokens, so only the word alone.
  CHECK(a.params.bad_words_ids == std::vector<std::vector<int32_t>>{{'c', 'a', 't'}, {'x'}});
  CHECK(refused_param({{"prompt", "ab"}, {"allowed_token_ids", json::array()}}, s.model, false) == "allowed_token_ids");
  CHECK(refused_param({{"prompt", "ab"}, {"allowed_token_ids", {300}}}, s.model, false) == "allowed_token_ids");
  CHECK(refused_param({{"prompt", "ab"}, {"bad_words", {"  "}}}, s.model, false) == "bad_words");
  CHECK(refused_param({{"prompt", "ab"}, {"bad_words", "cat"}}, s.model, false) == "bad_words");
  CHECK(parse_completion_request({{"prompt", "ab"}, {"allowed_token_ids", {7, 5, 7, 5}}}, s.model).params.allowed_token_ids ==
        std::vector<int32_t>{5, 7});  // each once: every choice carries a copy
  // Not together, nor beside structured output: a ban could leave no allowed token.
  CHECK(refused_param({{"prompt", "ab"}, {"allowed_token_ids", {5}}, {"bad_words", {"x"}}}, s.model, false) == "bad_words");
  const json choice = {{"prompt", "ab"}, {"guided_choice", {"yes", "no"}}};
  for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{
           {"ignore_eos", true}, {"allowed_token_ids", {5}}, {"bad_words", {"x"}}}) {
    json b = choice;
    b[field] = value;
    CHECK(refused_param(b, s.model, false) == field);
  }
  // What every choice copies is bounded: 10 long words x 128 choices.
  json many = {{"prompt", "ab"}, {"n", 128}, {"max_tokens", 1}};
  many["bad_words"] = json::array();
  for (int i = 0; i < 10; ++i) many["bad_words"].push_back(std::string(5000, 'a'));
  CHECK(refused_param(many, s.model, false) == "bad_words");
  CHECK(refused_param({{"prompt", "ab"}, {"priority", 0}}, s.model, false).empty());
}
