// Tokenizer::encode_pieces and special_token_spans: the building blocks of chat safety
// (runtime/chat/chat_encode.hpp, tested with the models' templates in tests/chat).
#include <catch2/catch.hpp>

#include "runtime/tokenizer/tokenizer.hpp"
#include "tests/tokenizer/tokenizer_test_util.hpp"

using namespace kiln;

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

TEST_CASE("special_token_spans finds each special token's own text, longest first, never plain added tokens") {
  test::TempDir dir;
  const std::string path = dir.file("tokenizer.json");
  test::write_file(path, R"({
    "added_tokens": [{"id": 3, "content": "<m>", "special": true, "lstrip": true},
                     {"id": 4, "content": "<m>>", "special": true},
                     {"id": 5, "content": "<p>", "special": false},
                     {"id": 6, "content": "<n>", "special": true, "normalized": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "Ġ": 2}, "merges": []}})");
  const Tokenizer t = Tokenizer::from_tokenizer_json(path);
  const std::string text = "a <m> <m>> <p> <n><m";
  const std::vector<TextSpan> spans = t.special_token_spans(text);
  REQUIRE(spans.size() == 3);
  CHECK(text.substr(spans[0].begin, spans[0].end - spans[0].begin) == "<m>");  // the whitespace lstrip takes is not its text
  CHECK(text.substr(spans[1].begin, spans[1].end - spans[1].begin) == "<m>>");
  CHECK(text.substr(spans[2].begin, spans[2].end - spans[2].begin) == "<n>");
}
