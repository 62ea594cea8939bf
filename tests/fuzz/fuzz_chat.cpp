// libFuzzer: chat rendering and encoding with the fixture tokenizers. Input: one byte choosing the
// tokenizer and format, then the system and user messages separated by a zero byte. Besides
// crashes, it checks the chat-safety invariant: the messages never add control tokens (the
// prompt has exactly the control tokens of the same chat with plain messages).
#include <algorithm>
#include <vector>

#include "runtime/tokenizer/chat_template.hpp"
#include "runtime/tokenizer/tokenizer.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {

struct Setup {
  const char* fixture;
  kiln::ChatFormat format;
};
constexpr Setup kSetups[] = {{"qwen3", kiln::ChatFormat::chatml},
                             {"smollm2", kiln::ChatFormat::chatml},
                             {"llama3", kiln::ChatFormat::llama3},
                             {"deepseek", kiln::ChatFormat::deepseek}};

const kiln::Tokenizer& tokenizer(size_t i) {
  static const std::vector<kiln::Tokenizer> all = [] {
    std::vector<kiln::Tokenizer> out;
    for (const Setup& s : kSetups) {
      out.push_back(kiln::Tokenizer::from_model_dir(std::string(KILN_SOURCE_DIR) + "/tests/tokenizer/fixtures/" + s.fixture));
    }
    return out;
  }();
  return all[i];
}

int64_t controls(const kiln::Tokenizer& t, const std::vector<int32_t>& ids) {
  return std::count_if(ids.begin(), ids.end(), [&](int32_t id) { return t.token_kind(id) == kiln::TokenKind::control; });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t which = data[0] % std::size(kSetups);
  const std::string_view rest = kiln::fuzz::as_text(data + 1, size - 1);
  const size_t split = rest.find('\0');
  const std::string_view system = split == std::string_view::npos ? std::string_view() : rest.substr(0, split);
  const std::string_view user = split == std::string_view::npos ? rest : rest.substr(split + 1);

  const kiln::Tokenizer& t = tokenizer(which);
  kiln::ChatOptions options;
  options.enable_thinking = (data[0] & 0x10) == 0;
  options.default_system = (data[0] & 0x20) ? "Be helpful." : "";
  const kiln::ChatFormat format = kSetups[which].format;
  kiln::render_chat(format, system, user, options);
  const std::vector<int32_t> ids = kiln::encode_chat(t, format, system, user, options);
  t.decode(ids);
  // The same chat with plain messages (non-empty where the originals are: an empty system prompt
  // drops chatml's system turn).
  const std::vector<int32_t> plain = kiln::encode_chat(t, format, system.empty() ? "" : "x", "x", options);
  if (controls(t, ids) != controls(t, plain)) __builtin_trap();

  options.special_tokens_in_text = true;  // the operator's opt-in: must not crash either
  t.decode(kiln::encode_chat(t, format, system, user, options));
  return 0;
}
