// Malformed inputs give errors that name the file and what is wrong; they never crash.
#include <catch2/catch.hpp>

#include "runtime/core/error.hpp"
#include "runtime/tokenizer/stream_decoder.hpp"
#include "runtime/weights/gguf.hpp"
#include "tests/tokenizer/tokenizer_test_util.hpp"

using namespace kiln;
using Catch::Contains;

namespace {

// Writes `content` to the file `name` in `dir`; returns its path.
std::string write(const test::TempDir& dir, const std::string& name, const std::string& content) {
  const std::string path = dir.file(name);
  test::write_file(path, content);
  return path;
}

const char* kValidJson = R"({
  "added_tokens": [],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}
})";

std::string with(std::string json, const std::string& from, const std::string& to) {
  const size_t at = json.find(from);
  REQUIRE(at != std::string::npos);
  return json.replace(at, from.size(), to);
}

Tokenizer load_gguf(const test::GgufBuilder& image) { return test::load_gguf_tokenizer(image, "test.gguf"); }

}  // namespace

TEST_CASE("the minimal valid tokenizer.json loads (the malformed variants below differ in one place)") {
  test::TempDir dir;
  const Tokenizer tokenizer = Tokenizer::from_tokenizer_json(write(dir, "tokenizer.json", kValidJson));
  CHECK(tokenizer.encode("abba") == std::vector<int32_t>{2, 1, 0});
}

TEST_CASE("tokenizer.json errors name the file and the problem") {
  test::TempDir dir;
  const auto load = [&](const std::string& content) {
    return Tokenizer::from_tokenizer_json(write(dir, "tokenizer.json", content));
  };
  const std::string path = (dir.path() / "tokenizer.json").string();
  CHECK_THROWS_WITH(Tokenizer::from_tokenizer_json((dir.path() / "missing.json").string()),
                    Contains("missing.json") && Contains("cannot open"));
  CHECK_THROWS_WITH(load("{\"model\": "), Contains(path) && Contains("not valid JSON"));
  CHECK_THROWS_WITH(load("[1, 2]"), Contains("expected a JSON object"));
  CHECK_THROWS_WITH(load("{\"added_tokens\": []}"), Contains(path) && Contains("has no \"model\""));
  CHECK_THROWS_WITH(load(with(kValidJson, R"("vocab": {"a": 0, "b": 1, "ab": 2}, )", "")),
                    Contains("model has no \"vocab\""));
  CHECK_THROWS_WITH(load(with(kValidJson, R"(, "merges": ["a b"])", "")), Contains("model has no \"merges\""));
  CHECK_THROWS_WITH(load(with(kValidJson, R"(["a b"])", R"(["a zz"])")),
                    Contains(path) && Contains("merge 0") && Contains("\"zz\", which is not in the vocabulary"));
  CHECK_THROWS_WITH(load(with(kValidJson, R"(["a b"])", R"(["b a"])")), Contains("\"ba\", which is not in the vocabulary"));
  CHECK_THROWS_WITH(load(with(kValidJson, R"(["a b"])", R"(["a b c"])")), Contains("merges[0]"));
  CHECK_THROWS_WITH(load(with(kValidJson, R"("b": 1)", R"("b": "one")")), Contains("model.vocab[\"b\"]"));
  CHECK_THROWS_WITH(load(with(kValidJson, R"("b": 1)", R"("b": 3000000000)")),
                    Contains("token \"b\" has id 3000000000, expected 0..2"));
  CHECK_THROWS_WITH(load(with(kValidJson, R"("b": 1)", R"("b": 0)")), Contains("id 0 is used by both"));
  CHECK_THROWS_WITH(load(with(kValidJson, R"("type": "BPE")", R"("type": "Unigram")")), Contains("only BPE"));
  CHECK_THROWS_WITH(load(with(kValidJson, R"({"type": "ByteLevel", "add_prefix_space")", R"({"type": "Whitespace", "x")")),
                    Contains("\"Whitespace\"") && Contains("supported pre-tokenizers"));
  CHECK_THROWS_WITH(load(with(kValidJson, R"("normalizer": null)", R"("normalizer": {"type": "Lowercase"})")),
                    Contains("\"Lowercase\"") && Contains("supported normalizers"));
  CHECK_THROWS_WITH(load(with(kValidJson, R"("decoder": {"type": "ByteLevel"})", R"("decoder": {"type": "WordPiece"})")),
                    Contains("\"WordPiece\""));
  CHECK_THROWS_WITH(load(with(kValidJson, R"(["a b"])", R"(["a b",])")), Contains("not valid JSON"));
  CHECK_THROWS_WITH(load(with(kValidJson, R"("decoder": {"type": "ByteLevel"})", R"("decoder": null)")),
                    Contains("decoder is null"));
  CHECK_THROWS_WITH(
      load(with(kValidJson, R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})",
                R"({"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated", "invert": false})")),
      Contains("regex does not compile"));
  CHECK_THROWS_WITH(load(with(kValidJson, R"("added_tokens": [])",
                              R"("added_tokens": [{"id": 3, "content": "a", "special": true}])")),
                    Contains("token \"a\" has two ids, 0 and 3"));
}

TEST_CASE("model directory and config-file errors") {
  test::TempDir dir;
  CHECK_THROWS_WITH(Tokenizer::from_model_dir(dir.path().string()), Contains("no tokenizer.json"));
  CHECK_THROWS_WITH(Tokenizer::from_model_dir((dir.path() / "nope").string()), Contains("not a directory"));
  write(dir, "tokenizer.json", kValidJson);
  write(dir, "tokenizer_config.json", R"({"bos_token": "<s>"})");
  CHECK_THROWS_WITH(Tokenizer::from_model_dir(dir.path().string()),
                    Contains("tokenizer_config.json bos_token") && Contains("\"<s>\" is not in the vocabulary"));
  write(dir, "tokenizer_config.json", R"({"eos_token": "b"})");
  write(dir, "generation_config.json", R"({"eos_token_id": [7]})");
  CHECK_THROWS_WITH(Tokenizer::from_model_dir(dir.path().string()),
                    Contains("generation_config.json eos_token_id") && Contains("token id 7 is outside"));
  write(dir, "generation_config.json", R"({"eos_token_id": "x"})");
  CHECK_THROWS_WITH(Tokenizer::from_model_dir(dir.path().string()), Contains("eos_token_id must be an integer"));
  write(dir, "generation_config.json", R"({"eos_token_id": [2, 1]})");
  CHECK(Tokenizer::from_model_dir(dir.path().string()).eos_ids() == std::vector<int32_t>{2, 1});
}

TEST_CASE("GGUF errors name the file and the key") {
  test::GgufBuilder weights_only;
  weights_only.kv_string("general.architecture", "llama");
  CHECK_THROWS_WITH(load_gguf(weights_only), Contains("test.gguf") && Contains("no tokenizer in this GGUF"));

  test::GgufBuilder bert;
  bert.kv_string("tokenizer.ggml.model", "bert");
  bert.kv_string_array("tokenizer.ggml.tokens", {"a", "b"});
  CHECK_THROWS_WITH(load_gguf(bert), Contains("tokenizer.ggml.model is 'bert'"));

  test::GgufBuilder no_merges;
  no_merges.kv_string("tokenizer.ggml.model", "gpt2");
  no_merges.kv_string_array("tokenizer.ggml.tokens", {"a", "b", "ab"});
  CHECK_THROWS_WITH(load_gguf(no_merges), Contains("tokenizer.ggml.merges is missing"));

  test::GgufBuilder no_pre = no_merges;
  no_pre.kv_string_array("tokenizer.ggml.merges", {"a b"});
  CHECK_THROWS_WITH(load_gguf(no_pre), Contains("tokenizer.ggml.pre is missing"));

  test::GgufBuilder odd_pre = no_pre;
  odd_pre.kv_string("tokenizer.ggml.pre", "made-up");
  CHECK_THROWS_WITH(load_gguf(odd_pre), Contains("'made-up' is not supported"));

  test::GgufBuilder bad_merge = no_merges;
  bad_merge.kv_string_array("tokenizer.ggml.merges", {"a zz"});
  bad_merge.kv_string("tokenizer.ggml.pre", "gpt-2");
  CHECK_THROWS_WITH(load_gguf(bad_merge), Contains("test.gguf: merge 0") && Contains("\"zz\""));

  test::GgufBuilder no_scores;
  no_scores.kv_string("tokenizer.ggml.model", "llama");
  no_scores.kv_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
  CHECK_THROWS_WITH(load_gguf(no_scores), Contains("tokenizer.ggml.scores is missing"));

  test::GgufBuilder duplicate;
  duplicate.kv_string("tokenizer.ggml.model", "gpt2");
  duplicate.kv_string_array("tokenizer.ggml.tokens", {"a", "a"});
  CHECK_THROWS_WITH(load_gguf(duplicate), Contains("token \"a\" has two ids, 0 and 1"));

  test::GgufBuilder good = no_pre;
  good.kv_string("tokenizer.ggml.pre", "gpt-2");
  CHECK(load_gguf(good).encode("ab") == std::vector<int32_t>{2});
}

TEST_CASE("ids outside the vocabulary are errors, not crashes") {
  const Tokenizer& gpt2 = test::gguf_tokenizer("gpt-2");
  const std::vector<int32_t> bad{15496, 50257};
  CHECK_THROWS_WITH(gpt2.decode(bad), Contains("token id 50257 is outside the vocabulary"));
  CHECK_THROWS_WITH(gpt2.decode(std::vector<int32_t>{-1}), Contains("token id -1"));
  CHECK_THROWS_AS(gpt2.token_text(1 << 30), Error);
  StreamDecoder stream(gpt2);
  CHECK_THROWS_AS(stream.push(99999999), Error);
  CHECK(gpt2.token_id("definitely not a token") == -1);
}

// Issue 13, defect 1: a pre_tokenizer Sequence nested 200,000 deep crashed the loader (each level
// copied the subtree and built its path string); it must be one error naming the file.
TEST_CASE("a tokenizer.json nested 200,000 levels deep is rejected, not a crash") {
  test::TempDir dir;
  std::string nested;
  constexpr int kLevels = 200000;
  for (int i = 0; i < kLevels; ++i) nested += R"({"type": "Sequence", "pretokenizers": [)";
  nested += R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
  for (int i = 0; i < kLevels; ++i) nested += "]}";
  const std::string path = write(
      dir, "tokenizer.json",
      with(kValidJson, R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})", nested));
  CHECK_THROWS_WITH(Tokenizer::from_tokenizer_json(path), Contains(path) && Contains("nested deeper than"));
}

// Issue 13, defect 4: an added-token id of 16,777,215 in a tiny file made the loader allocate a
// table of 16 M tokens (1 GB) before anything rejected it. Ids are bounded by the number of
// tokens the file declares.
TEST_CASE("an added-token id far beyond the tokens the file declares is rejected before allocating") {
  test::TempDir dir;
  const std::string path = write(dir, "tokenizer.json",
                                 with(kValidJson, R"("added_tokens": [])",
                                      R"("added_tokens": [{"id": 16777215, "content": "<x>", "special": true}])"));
  CHECK_THROWS_WITH(Tokenizer::from_tokenizer_json(path),
                    Contains(path) && Contains("16777215") && Contains("expected 0..3"));
}
