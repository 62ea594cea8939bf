// libFuzzer: chat rendering and encoding (runtime/chat/chat_encode.hpp) with the four models' own
// templates (tests/chat/templates) and fixture tokenizers. Input: one byte choosing the model and
// options, then the system and user messages separated by a zero byte. Besides crashes, it checks
// the chat-safety invariant: the messages never add control tokens (the prompt has exactly the
// control tokens of the same chat with plain messages).
#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "runtime/chat/chat_encode.hpp"
#include "runtime/tokenizer/tokenizer.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {

using nlohmann::json;

struct Setup {
  const char* fixture;
  const char* template_file;
};
constexpr Setup kSetups[] = {{"qwen3", "qwen3.jinja"},
                             {"smollm2", "smollm2.jinja"},
                             {"llama3", "llama-3.2.jinja"},
                             {"deepseek", "deepseek-v2.jinja"}};

struct Model {
  kiln::Tokenizer tokenizer;
  kiln::JinjaChatTemplate chat_template;
};

const Model& model(size_t i) {
  static const std::vector<Model> all = [] {
    std::vector<Model> out;
    for (const Setup& s : kSetups) {
      kiln::Tokenizer t =
          kiln::Tokenizer::from_model_dir(std::string(KILN_SOURCE_DIR) + "/tests/tokenizer/fixtures/" + s.fixture);
      std::ifstream in(std::string(KILN_SOURCE_DIR) + "/tests/chat/templates/" + s.template_file);
      std::stringstream source;
      source << in.rdbuf();
      kiln::JinjaChatTemplate tmpl = kiln::chat_template_for(t, source.str(), s.template_file);
      out.push_back(Model{std::move(t), std::move(tmpl)});
    }
    return out;
  }();
  return all[i];
}

int64_t controls(const kiln::Tokenizer& t, const std::vector<int32_t>& ids) {
  return std::count_if(ids.begin(), ids.end(), [&](int32_t id) { return t.token_kind(id) == kiln::TokenKind::control; });
}

json chat(std::string_view system, std::string_view user) {
  json messages = json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", std::string(system)}});
  messages.push_back({{"role", "user"}, {"content", std::string(user)}});
  return messages;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t which = data[0] % std::size(kSetups);
  const std::string_view rest = kiln::fuzz::as_text(data + 1, size - 1);
  const size_t split = rest.find('\0');
  const std::string_view system = split == std::string_view::npos ? std::string_view() : rest.substr(0, split);
  const std::string_view user = split == std::string_view::npos ? rest : rest.substr(split + 1);

  const Model& m = model(which);
  const json extra = {{"enable_thinking", (data[0] & 0x10) == 0}};
  kiln::fuzz::expect_kiln_errors_only([&] {
    // Invalid UTF-8 in a message ends here, as a kiln::Error naming the template.
    const kiln::EncodedChat encoded = kiln::encode_chat(m.tokenizer, m.chat_template, chat(system, user), true, extra);
    m.tokenizer.decode(encoded.ids);
    // The same chat with plain messages (non-empty where the originals are: an empty system prompt
    // drops the system turn).
    const kiln::EncodedChat plain =
        kiln::encode_chat(m.tokenizer, m.chat_template, chat(system.empty() ? "" : "x", "x"), true, extra);
    if (controls(m.tokenizer, encoded.ids) != controls(m.tokenizer, plain.ids)) __builtin_trap();
    // The operator's opt-in: must not crash either.
    m.tokenizer.decode(
        kiln::encode_chat(m.tokenizer, m.chat_template, chat(system, user), true, extra, /*special_tokens_in_text=*/true).ids);
  });
  return 0;
}
