// GGUF parsing: a crafted well-formed file, one crafted file per way a file can be wrong, the
// llama.cpp vocab files committed for the tokenizer tests, and a real model when it is cached.
#include <catch2/catch.hpp>

#include "runtime/weights/gguf.hpp"
#include "test_support.hpp"

using kiln::GgmlType;
using kiln::GgufFile;
using kiln::test::GgufBuilder;
using kiln::test::to_bytes;
using kiln::test::kF32;
using kiln::test::kQ8_0;
using kiln::test::kQ4_K;
using kiln::test::kI64;

namespace {

GgufFile parse(const std::vector<std::byte>& image) { return GgufFile::parse(image, "crafted.gguf"); }

std::vector<std::byte> zeros(size_t n) { return std::vector<std::byte>(n); }

// A file with a bit of everything: every scalar type, arrays, two tensors.
GgufBuilder rich_file() {
  GgufBuilder g;
  g.kv("u8", 0).u8(200);
  g.kv("i8", 1).put(int8_t{-100});
  g.kv("u16", 2).put(uint16_t{60000});
  g.kv("i16", 3).put(int16_t{-30000});
  g.kv_u32("u32", 4000000000u);
  g.kv("i32", 5).put(int32_t{-2000000000});
  g.kv_f32("f32", 1e-5f);
  g.kv("bool", 7).u8(1);
  g.kv_string("str", "héllo");
  g.kv("u64", 10).u64(18000000000000000000ull);
  g.kv("i64", 11).put(int64_t{-9000000000000000000});
  g.kv("f64", 12).put(0.1);
  g.kv("ints", 9).u32(5).u64(3).put(int32_t{-1}).put(int32_t{0}).put(int32_t{7});
  g.kv("floats", 9).u32(6).u64(2).put(1.5f).put(-2.0f);
  g.kv("bools", 9).u32(7).u64(2).u8(0).u8(1);
  g.kv_string_array("strings", {"a", "", "ccc"});
  g.kv("empty", 9).u32(8).u64(0);
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  g.tensor("first", {3, 2}, kF32, to_bytes(values));
  g.tensor("second", {32}, kQ8_0, zeros(34));
  return g;
}

}  // namespace

TEST_CASE("gguf: parses a crafted file with every value type", "[gguf]") {
  const std::vector<std::byte> image = rich_file().build();
  const GgufFile f = parse(image);
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 32);
  CHECK(f.keys() == std::vector<std::string>{"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "u64",
                                             "i64", "f64", "ints", "floats", "bools", "strings", "empty"});
  CHECK(f.get_int("u8") == 200);
  CHECK(f.get_int("i8") == -100);
  CHECK(f.get_int("u16") == 60000);
  CHECK(f.get_int("i16") == -30000);
  CHECK(f.get_int("u32") == 4000000000);
  CHECK(f.get_int("i32") == -2000000000);
  CHECK(f.get_float("f32") == static_cast<double>(1e-5f));
  CHECK(f.get_float("f64") == 0.1);
  CHECK(f.get_float("u32") == 4e9);  // integers read as floats too
  CHECK(f.get_bool("bool") == true);
  CHECK(f.get_string("str") == "h\xc3\xa9llo");
  CHECK(f.get_int("i64") == -9000000000000000000);
  CHECK(f.get_int_array("ints") == std::vector<int64_t>{-1, 0, 7});
  CHECK(f.get_float_array("floats") == std::vector<double>{1.5, -2.0});
  CHECK(f.get_float_array("ints") == std::vector<double>{-1, 0, 7});
  CHECK(f.get_string_array("strings") == std::vector<std::string>{"a", "", "ccc"});
  CHECK(f.get_string_array("empty").empty());
  REQUIRE(f.find("bools") != nullptr);
  CHECK(f.find("bools")->type_name() == "ARRAY[BOOL]");
  CHECK(f.find("bools")->array_size() == 2);
  CHECK(f.find("str")->array_size() == 0);
  CHECK(f.has("u8"));
  CHECK_FALSE(f.has("nope"));
  CHECK(f.find("nope") == nullptr);

  // Typed getters name the file and key when the key is missing or of another type.
  CHECK_KILN_ERROR(f.get_int("nope"), "crafted.gguf", "\"nope\"", "missing");
  CHECK_KILN_ERROR(f.get_string("u32"), "\"u32\"", "UINT32", "expected STRING");
  CHECK_KILN_ERROR(f.get_int("f32"), "\"f32\"", "FLOAT32", "expected an integer");
  CHECK_KILN_ERROR(f.get_int("u64"), "\"u64\"", "does not fit int64");
  CHECK_KILN_ERROR(f.get_bool("u8"), "\"u8\"", "expected BOOL");
  CHECK_KILN_ERROR(f.get_float("str"), "\"str\"", "expected a number");
  CHECK_KILN_ERROR(f.get_string_array("ints"), "\"ints\"", "ARRAY[INT32]", "expected ARRAY[STRING]");
  CHECK_KILN_ERROR(f.get_int_array("floats"), "\"floats\"", "expected an integer array");
  CHECK_KILN_ERROR(f.get_float_array("strings"), "\"strings\"", "expected a number array");

  REQUIRE(f.tensors().size() == 2);
  const kiln::GgufTensor* first = f.find_tensor("first");
  REQUIRE(first != nullptr);
  CHECK(first->type == GgmlType::F32);
  CHECK(first->ne == std::vector<int64_t>{3, 2});
  CHECK(first->numel() == 6);
  CHECK(first->offset == 0);
  REQUIRE(first->bytes.size() == 24);
  float third;
  std::memcpy(&third, first->bytes.data() + 8, 4);
  CHECK(third == 3.0f);
  const kiln::GgufTensor* second = f.find_tensor("second");
  REQUIRE(second != nullptr);
  CHECK(second->type == GgmlType::Q8_0);
  CHECK(second->offset == 32);  // 24 bytes rounded up to the alignment
  CHECK(second->bytes.size() == 34);
  CHECK(f.find_tensor("third") == nullptr);
  CHECK(kiln::ggml_type_name(second->type) == "Q8_0");
}

TEST_CASE("gguf: version 2, custom alignment, and a file without tensors", "[gguf]") {
  GgufBuilder g;
  g.version = 2;
  g.alignment = 64;
  g.kv_u32("general.alignment", 64);
  g.tensor("a", {4}, kF32, zeros(16));
  g.tensor("b", {4}, kF32, zeros(16));
  const GgufFile f = parse(g.build());
  CHECK(f.version() == 2);
  CHECK(f.alignment() == 64);
  CHECK(f.find_tensor("b")->offset == 64);

  // Vocab-only files may end right after the metadata, before any padding.
  GgufBuilder vocab;
  vocab.kv_string("general.architecture", "llama");
  const std::vector<std::byte> image = vocab.build();
  CHECK(image.size() % 32 != 0);
  CHECK(parse(image).tensors().empty());
}

TEST_CASE("gguf: rejects malformed files", "[gguf]") {
  SECTION("bad magic") {
    GgufBuilder g;
    g.magic = "GGML";
    CHECK_KILN_ERROR(parse(g.build()), "crafted.gguf", "not a GGUF file", "expected \"GGUF\"");
    CHECK_KILN_ERROR(parse(zeros(2)), "magic", "needs 4 bytes");
  }
  SECTION("unsupported version") {
    GgufBuilder g;
    g.version = 1;
    CHECK_KILN_ERROR(parse(g.build()), "unsupported GGUF version 1", "expected 2 or 3");
    g.version = 4;
    CHECK_KILN_ERROR(parse(g.build()), "unsupported GGUF version 4");
    g.version = 0x03000000;  // a big-endian v3 file read little-endian
    CHECK_KILN_ERROR(parse(g.build()), "big-endian");
  }
  SECTION("counts beyond what the file can hold") {
    GgufBuilder g;
    g.tensor_count = uint64_t{1} << 62;
    CHECK_KILN_ERROR(parse(g.build()), "tensor_count 4611686018427387904", "cannot fit");
    GgufBuilder k;
    k.kv_count = uint64_t{1} << 62;
    CHECK_KILN_ERROR(parse(k.build()), "kv_count 4611686018427387904", "cannot fit");
    GgufBuilder one_short;  // claims two kv pairs, holds one
    one_short.kv_u32("a", 1);
    one_short.kv_count = 2;
    one_short.kv_bytes.bytes().resize(one_short.kv_bytes.size() + 20);  // room for the count check only
    CHECK_THROWS_AS(parse(one_short.build()), kiln::Error);
  }
  SECTION("string lengths beyond the file") {
    GgufBuilder g;
    g.kv_bytes.u64(1000).raw("abc");
    g.kvs = 1;
    g.kv_bytes.bytes().resize(40);
    CHECK_KILN_ERROR(parse(g.build()), "key of kv pair 0", "needs 1000 bytes");
    GgufBuilder v;
    v.kv("k", 8).u64(~uint64_t{0});
    CHECK_KILN_ERROR(parse(v.build()), "value of key \"k\"", "needs 18446744073709551615 bytes");
  }
  SECTION("unknown value type") {
    GgufBuilder g;
    g.kv("k", 13).u32(0);
    CHECK_KILN_ERROR(parse(g.build()), "\"k\"", "unknown value type 13");
    GgufBuilder a;
    a.kv("arr", 9).u32(99).u64(0);
    CHECK_KILN_ERROR(parse(a.build()), "\"arr\"", "unknown array element type 99");
  }
  SECTION("arrays of arrays are rejected explicitly") {
    GgufBuilder g;
    g.kv("nested", 9).u32(9).u64(1).u32(4).u64(1).u32(7);
    CHECK_KILN_ERROR(parse(g.build()), "\"nested\"", "arrays of arrays are not supported");
  }
  SECTION("array count beyond the file") {
    GgufBuilder g;
    g.kv("arr", 9).u32(4).u64(uint64_t{1} << 61).u32(1);
    CHECK_KILN_ERROR(parse(g.build()), "\"arr\"", "array of 2305843009213693952 UINT32", "cannot fit");
    GgufBuilder s;
    s.kv("strs", 9).u32(8).u64(1000).u64(0);
    CHECK_KILN_ERROR(parse(s.build()), "\"strs\"", "array of 1000 STRING");
  }
  SECTION("bool bytes other than 0 and 1") {
    GgufBuilder g;
    g.kv("flag", 7).u8(2);
    CHECK_KILN_ERROR(parse(g.build()), "\"flag\"", "BOOL byte is 2");
  }
  SECTION("n_dims 0 or above 4") {
    GgufBuilder g;
    g.tensor("t", {}, kF32, zeros(4));
    CHECK_KILN_ERROR(parse(g.build()), "tensor \"t\"", "n_dims is 0", "expected 1..4");
    GgufBuilder h;
    h.tensor("t", {1, 1, 1, 1, 1}, kF32, zeros(4));
    CHECK_KILN_ERROR(parse(h.build()), "tensor \"t\"", "n_dims is 5");
  }
  SECTION("zero or negative dims") {
    GgufBuilder g;
    g.tensor("t", {4, 0}, kF32, zeros(0));
    CHECK_KILN_ERROR(parse(g.build()), "tensor \"t\"", "ne[1] = 0", "not a positive dimension");
    GgufBuilder h;
    h.tensor("t", {~uint64_t{0}}, kF32, zeros(4));
    CHECK_KILN_ERROR(parse(h.build()), "tensor \"t\"", "ne[0] = -1");
  }
  SECTION("unknown ggml type") {
    for (uint32_t id : {4u, 5u, 31u, 36u, 42u, 1000u}) {
      GgufBuilder g;
      g.tensor("t", {32}, id, zeros(256));
      CHECK_KILN_ERROR(parse(g.build()), "tensor \"t\"", "unknown ggml type id " + std::to_string(id));
    }
  }
  SECTION("rows that are not whole blocks") {
    GgufBuilder g;
    g.tensor("t", {33, 2}, kQ8_0, zeros(100));
    CHECK_KILN_ERROR(parse(g.build()), "tensor \"t\"", "ne[0] = 33", "Q8_0 block size 32");
  }
  SECTION("offset not aligned") {
    GgufBuilder g;
    g.tensor("t", {4}, kF32, zeros(16));
    g.tensors[0].offset = 4;
    CHECK_KILN_ERROR(parse(g.build()), "tensor \"t\"", "offset 4", "alignment 32");
  }
  SECTION("tensor data out of range") {
    GgufBuilder g;
    g.tensor("t", {8}, kF32, zeros(31));  // needs 32 bytes; the file ends one short
    CHECK_KILN_ERROR(parse(g.build()), "tensor \"t\"", "[0, 32)", "past the end of the data section (31 bytes)");
    GgufBuilder far;
    far.tensor("t", {8}, kF32, zeros(32));
    far.tensors[0].offset = uint64_t{1} << 40;
    far.tensors[0].data.clear();
    CHECK_THROWS_AS(parse(far.build()), kiln::Error);
  }
  SECTION("tensors overlapping or out of order") {
    GgufBuilder g;
    g.tensor("a", {16}, kF32, zeros(64));
    g.tensor("b", {16}, kF32, zeros(64));
    g.tensors[1].offset = 32;  // inside a
    CHECK_KILN_ERROR(parse(g.build()), "tensor \"b\"", "overlaps or precedes tensor \"a\"");
    GgufBuilder o;
    o.tensor("a", {8}, kF32, zeros(32));
    o.tensor("b", {8}, kF32, zeros(32));
    std::swap(o.tensors[0].offset, o.tensors[1].offset);  // b declared after a but stored before
    CHECK_KILN_ERROR(parse(o.build()), "tensor \"b\"", "offsets must increase in declaration order");
  }
  SECTION("size overflow") {
    GgufBuilder g;  // 2^32 * 2^32 elements
    g.tensor("t", {uint64_t{1} << 32, uint64_t{1} << 32}, kF32, zeros(4));
    CHECK_KILN_ERROR(parse(g.build()), "tensor \"t\"", "element count overflows");
    GgufBuilder b;  // 2^62 elements fit int64, 2^62 * 4 bytes do not fit uint64
    b.tensor("t", {uint64_t{1} << 62}, kF32, zeros(4));
    CHECK_KILN_ERROR(parse(b.build()), "tensor \"t\"", "byte size overflows");
    GgufBuilder k;  // I64: 2^61 * 2 elements of 8 bytes = 2^65 bytes
    k.tensor("t", {uint64_t{1} << 61, 2}, kI64, zeros(4));
    CHECK_KILN_ERROR(parse(k.build()), "tensor \"t\"", "byte size overflows");
    GgufBuilder q;  // block types cannot overflow: 2^62 Q4_K elements are 2^54 * 144 bytes, just too many
    q.tensor("t", {uint64_t{1} << 62}, kQ4_K, zeros(4));
    CHECK_KILN_ERROR(parse(q.build()), "tensor \"t\"", "[0, 2594073385365405696)", "past the end");
    GgufBuilder e;  // offset + size wraps around
    e.tensor("t", {8}, kF32, zeros(32));
    e.tensors[0].offset = ~uint64_t{0} - 31;
    e.tensors[0].data.clear();
    CHECK_KILN_ERROR(parse(e.build()), "tensor \"t\"", "overflows");
  }
  SECTION("duplicate keys or tensor names") {
    GgufBuilder g;
    g.kv_u32("k", 1).kv_u32("k", 2);
    CHECK_KILN_ERROR(parse(g.build()), "duplicate key \"k\"");
    GgufBuilder t;
    t.tensor("t", {8}, kF32, zeros(32)).tensor("t", {8}, kF32, zeros(32));
    CHECK_KILN_ERROR(parse(t.build()), "duplicate tensor name \"t\"");
  }
  SECTION("alignment that is not a power of two, zero, or not UINT32") {
    for (uint32_t a : {0u, 24u, 33u}) {
      GgufBuilder g;
      g.kv_u32("general.alignment", a);
      CHECK_KILN_ERROR(parse(g.build()), "general.alignment " + std::to_string(a), "not a power of two");
    }
    GgufBuilder u;
    u.kv("general.alignment", 10).u64(32);
    CHECK_KILN_ERROR(parse(u.build()), "general.alignment is UINT64", "expected UINT32");
  }
  SECTION("empty key or tensor name") {
    GgufBuilder g;
    g.kv_u32("", 1);
    CHECK_KILN_ERROR(parse(g.build()), "empty key");
    GgufBuilder t;
    t.tensor("", {8}, kF32, zeros(32));
    CHECK_KILN_ERROR(parse(t.build()), "empty name");
  }
}

TEST_CASE("gguf: every truncation of a valid file is rejected cleanly", "[gguf]") {
  const std::vector<std::byte> image = rich_file().build();
  REQUIRE_NOTHROW(parse(image));
  const std::span<const std::byte> full(image);
  for (size_t n = 0; n < full.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    CHECK_THROWS_AS(GgufFile::parse(full.first(n), "prefix"), kiln::Error);
  }
}

TEST_CASE("gguf: corrupting any single byte never crashes", "[gguf]") {
  // Each byte of the header and metadata set to a few hostile values: the parser either accepts
  // the result or throws kiln::Error; nothing else may happen.
  const std::vector<std::byte> image = rich_file().build();
  size_t rejected = 0;
  for (size_t i = 0; i < image.size(); ++i) {
    for (const uint8_t value : {0x00, 0x01, 0x7f, 0x80, 0xff}) {
      std::vector<std::byte> corrupt = image;
      corrupt[i] = std::byte{value};
      try {
        GgufFile::parse(corrupt, "corrupt");
      } catch (const kiln::Error&) {
        ++rejected;
      }
    }
  }
  CHECK(rejected > 0);
}

TEST_CASE("gguf: the real vocab-only files in tests/tokenizer/vectors", "[gguf][real]") {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/tokenizer/vectors/";
  // Expected values read with gguf-py's GGUFReader.
  {
    const GgufFile f(dir + "ggml-vocab-llama-spm.gguf");
    CHECK(f.version() == 3);
    CHECK(f.tensors().empty());
    CHECK(f.keys().size() == 22);
    CHECK(f.get_string("general.architecture") == "llama");
    CHECK(f.get_string("tokenizer.ggml.model") == "llama");
    CHECK(f.get_int("llama.vocab_size") == 32000);
    CHECK(f.get_float("llama.attention.layer_norm_rms_epsilon") == static_cast<double>(1e-5f));
    const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
    REQUIRE(tokens.size() == 32000);
    CHECK(tokens[0] == "<unk>");
    CHECK(tokens[1] == "<s>");
    CHECK(tokens[31999] == "\xe7\xbb\x99");  // 给
    const auto scores = f.get_float_array("tokenizer.ggml.scores");
    REQUIRE(scores.size() == 32000);
    CHECK(scores[31999] == -31740.0);
    const auto types = f.get_int_array("tokenizer.ggml.token_type");
    CHECK(std::vector<int64_t>(types.begin(), types.begin() + 3) == std::vector<int64_t>{2, 3, 3});
    CHECK(f.get_bool("tokenizer.ggml.add_bos_token") == true);
    CHECK(f.get_int("tokenizer.ggml.unknown_token_id") == 0);
  }
  {
    const GgufFile f(dir + "ggml-vocab-gpt-2.gguf");
    CHECK(f.keys().size() == 16);
    CHECK(f.get_string("general.architecture") == "gpt2");
    CHECK(f.get_string("tokenizer.ggml.pre") == "gpt-2");
    const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
    REQUIRE(tokens.size() == 50257);
    CHECK(tokens[50256] == "<|endoftext|>");
    const auto merges = f.get_string_array("tokenizer.ggml.merges");
    REQUIRE(merges.size() == 50000);
    CHECK(merges[0] == "\xc4\xa0 t");  // "Ġ t"
    CHECK(merges[49999] == "\xc4\xa0g azed");
    CHECK(f.get_int("tokenizer.ggml.bos_token_id") == 50256);
  }
  {
    const GgufFile f(dir + "ggml-vocab-deepseek-llm.gguf");
    CHECK(f.keys().size() == 23);
    CHECK(f.get_string("tokenizer.ggml.pre") == "deepseek-llm");
    CHECK(f.get_string_array("tokenizer.ggml.tokens").size() == 102400);
    CHECK(f.get_string_array("tokenizer.ggml.merges").size() == 99757);
    CHECK(f.get_int("tokenizer.ggml.bos_token_id") == 100000);
    CHECK(f.get_bool("tokenizer.ggml.add_eos_token") == false);
  }
}

TEST_CASE("gguf: the real SmolLM2-135M-Instruct Q4_1 file", "[gguf][real]") {
  const auto path = kiln::test::cached_smollm2();
  if (!path) {
    WARN("SKIPPED: SmolLM2 GGUF not in the kiln cache (run tools/fetch-smollm2)");
    return;
  }
  const GgufFile f(*path);
  CHECK(f.version() == 3);
  CHECK(f.keys().size() == 33);
  REQUIRE(f.tensors().size() == 272);
  size_t q4_1 = 0, f32 = 0, q8_0 = 0;
  for (const kiln::GgufTensor& t : f.tensors()) {
    q4_1 += t.type == GgmlType::Q4_1;
    f32 += t.type == GgmlType::F32;
    q8_0 += t.type == GgmlType::Q8_0;
  }
  CHECK(q4_1 == 210);
  CHECK(f32 == 61);
  CHECK(q8_0 == 1);
  // Offsets as gguf-py reports them (data section starts at byte 1785664).
  const kiln::GgufTensor& embd = f.tensors()[0];
  CHECK(embd.name == "token_embd.weight");
  CHECK(embd.ne == std::vector<int64_t>{576, 49152});
  CHECK(embd.offset == 0);
  CHECK(embd.bytes.size() == 30081024);
  const kiln::GgufTensor* q = f.find_tensor("blk.0.attn_q.weight");
  REQUIRE(q != nullptr);
  CHECK(q->type == GgmlType::Q4_1);
  CHECK(q->offset == 33806656 - 1785664);
  CHECK(q->bytes.size() == 207360);
  CHECK(f.get_string("tokenizer.ggml.pre") == "smollm");
  CHECK(f.get_string_array("tokenizer.ggml.merges").size() == 48900);
}
