// JinjaChatTemplate (minja) renders the models' chat templates byte for byte as Python jinja2 does
// (tests/chat/expected.json, from gen_expected.py), and reports template errors clearly.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/chat/jinja_template.hpp"
#include "runtime/core/error.hpp"
#include "tests/support/temp_dir.hpp"

using nlohmann::json;
using kiln::JinjaChatTemplate;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::string kDir = std::string(KILN_SOURCE_DIR) + "/tests/chat/";

}  // namespace

TEST_CASE("the four models' templates render as Python jinja2 renders them") {
  const json expected = json::parse(read(kDir + "expected.json"));
  REQUIRE(expected["cases"].size() >= 60);
  int checked = 0;
  for (const json& c : expected["cases"]) {
    const std::string file = c["template"];
    const JinjaChatTemplate t(read(kDir + "templates/" + file), c["bos_token"], c["eos_token"], file);
    const std::string got = t.render(c["messages"], c["add_generation_prompt"], c["extra"]);
    INFO(file << " conversation " << c["conversation"] << " add_generation_prompt " << c["add_generation_prompt"]
              << " extra " << c["extra"].dump());
    CHECK(got == c["expected"].get<std::string>());
    ++checked;
  }
  CHECK(checked == static_cast<int>(expected["cases"].size()));
}

TEST_CASE("content given as text parts is joined, and other message shapes are refused naming the field") {
  const JinjaChatTemplate t(read(kDir + "templates/smollm2.jinja"), "", "", "smollm2.jinja");
  const json parts = json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])");
  const json plain = json::parse(R"([{"role": "user", "content": "a\nb"}])");
  CHECK(t.render(parts, true) == t.render(plain, true));
  CHECK_THROWS_WITH(t.render(json::parse(R"([{"content": "x"}])"), true), Catch::Contains("messages[0].role"));
  CHECK_THROWS_WITH(t.render(json::parse(R"([{"role": "user", "content": 5}])"), true), Catch::Contains("messages[0].content"));
  CHECK_THROWS_WITH(t.render(json::array(), true), Catch::Contains("messages"));
  CHECK_THROWS_WITH(t.render(json::parse(R"([{"role": "user", "content": [{"type": "image_url"}]}])"), true),
                    Catch::Contains("messages[0].content[0]"));
}

TEST_CASE("template errors name the template") {
  CHECK_THROWS_WITH(JinjaChatTemplate("{% for x in %}", "", "", "broken.jinja"), Catch::Contains("broken.jinja"));
  const JinjaChatTemplate raising("{{ raise_exception('no system role') }}", "", "", "raising.jinja");
  CHECK_THROWS_WITH(raising.render(json::parse(R"([{"role": "user", "content": "x"}])"), true),
                    Catch::Contains("raising.jinja") && Catch::Contains("no system role"));
}

TEST_CASE("strftime_now gives today's date to templates that ask for it (Llama 3.x)") {
  const JinjaChatTemplate t(read(kDir + "templates/llama-3.2.jinja"), "<|begin_of_text|>", "<|eot_id|>", "llama");
  const std::string text = t.render(json::parse(R"([{"role": "user", "content": "hi"}])"), true);
  char today[64];
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::strftime(today, sizeof today, "%d %b %Y", &local);
  CHECK(text.find(std::string("Today Date: ") + today) != std::string::npos);
}

TEST_CASE("a model directory's template: chat_template.jinja, else tokenizer_config.json") {
  kiln::test::TempDir dir("kiln-chat-template");
  CHECK(kiln::find_chat_template(dir.path().string()).empty());
  std::ofstream(dir.path() / "tokenizer_config.json") << R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})";
  CHECK(kiln::find_chat_template(dir.path().string()) == "D");
  std::ofstream(dir.path() / "chat_template.jinja") << "J";
  CHECK(kiln::find_chat_template(dir.path().string()) == "J");
}
