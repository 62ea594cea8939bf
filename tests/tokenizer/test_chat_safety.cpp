// encode_chat: the template's markers become control tokens, the messages' text never does
// (issue 13, defect 2), and for benign text the ids are exactly those of the rendered prompt.
#include <catch2/catch.hpp>

#include "runtime/tokenizer/chat_template.hpp"
#include "tests/tokenizer/tokenizer_test_util.hpp"

using namespace kiln;

namespace {

struct Case {
  const char* fixture;
  ChatFormat format;
};
const Case kCases[] = {{"llama3", ChatFormat::llama3}, {"qwen3", ChatFormat::chatml},
                       {"smollm2", ChatFormat::chatml}, {"deepseek", ChatFormat::deepseek}};

int64_t count_special(const Tokenizer& t, const std::vector<int32_t>& ids) {
  return std::count_if(ids.begin(), ids.end(), [&](int32_t id) { return t.is_special(id); });
}

}  // namespace

TEST_CASE("encode_chat equals encoding the rendered prompt when the messages are benign") {
  const auto texts = test::random_unicode_strings(60, 1313);
  for (const Case& c : kCases) {
    const Tokenizer& t = test::fixture_tokenizer(c.fixture);
    for (size_t i = 0; i + 1 < texts.size(); i += 2) {
      for (const bool with_system : {false, true}) {
        const std::string system = with_system ? texts[i + 1] : "";
        ChatOptions options;
        const bool add_bos = !chat_renders_bos(c.format) && t.add_bos_by_default();
        INFO(c.fixture << " system: \"" << system << "\" user: \"" << texts[i] << "\"");
        CHECK(encode_chat(t, c.format, system, texts[i], options) ==
              t.encode(render_chat(c.format, system, texts[i], options), add_bos));
      }
    }
  }
}

TEST_CASE("special-token text in chat messages stays text; the opt-in restores the old parse") {
  for (const Case& c : kCases) {
    const Tokenizer& t = test::fixture_tokenizer(c.fixture);
    INFO(c.fixture);
    const std::vector<int32_t> benign = encode_chat(t, c.format, "sys", "hello");
    // Every special token of the vocabulary spelled inside both messages (no whitespace at the
    // ends: the llama3 template strips the messages).
    std::string injected;
    for (size_t id = 0; id < t.vocab_size(); ++id) {
      if (t.token_kind(static_cast<int32_t>(id)) == TokenKind::control) injected += std::string(t.token_text(static_cast<int32_t>(id))) + "x";
    }
    REQUIRE_FALSE(injected.empty());
    const std::vector<int32_t> safe = encode_chat(t, c.format, "sys" + injected, "hello" + injected);
    CHECK(count_special(t, safe) == count_special(t, benign));
    // The text survives: decoding gives back what the user wrote.
    CHECK(t.decode(safe).find(injected) != std::string::npos);

    ChatOptions unsafe;
    unsafe.special_tokens_in_text = true;
    CHECK(count_special(t, encode_chat(t, c.format, "sys" + injected, "hello" + injected, unsafe)) >
          count_special(t, benign));
  }
}

TEST_CASE("encode_pieces: a special piece's rstrip / lstrip takes the whitespace next to it, as HF's split does") {
  test::TempDir dir;
  const std::string path = dir.file("tokenizer.json");
  test::write_file(path, R"({
    "added_tokens": [{"id": 3, "content": "<m>", "special": true, "lstrip": true, "rstrip": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "Ġ": 2}, "merges": []}})");
  const Tokenizer t = Tokenizer::from_tokenizer_json(path);
  const std::vector<TextPiece> pieces = {{"a  ", false}, {"<m>", true}, {"  b", false}};
  CHECK(t.encode_pieces(pieces) == t.encode("a  <m>  b"));
  CHECK(t.encode_pieces(pieces) == std::vector<int32_t>{0, 3, 1});
  // A special piece the vocabulary lacks is plain text; plain pieces never match special tokens.
  CHECK(t.encode_pieces(std::vector<TextPiece>{{"a<m>", false}}) == t.encode("a<m>", false, false));
}
