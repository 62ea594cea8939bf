// safetensors: round trip, float conversion, sharded directories, and one crafted file per way a
// header can be wrong.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "runtime/weights/safetensors.hpp"
#include "test_support.hpp"

using kiln::DType;
using kiln::test::ByteWriter;
using kiln::test::TempDir;

namespace {

// A safetensors image: u64 header length (given, or the true length), header text, data bytes.
std::vector<std::byte> image(const std::string& header, size_t data_bytes, std::optional<uint64_t> header_len = {}) {
  ByteWriter w;
  w.u64(header_len.value_or(header.size())).raw(header);
  w.bytes().resize(w.size() + data_bytes, std::byte{0x5a});
  return std::move(w.bytes());
}

std::vector<kiln::TensorView> parse(const std::string& header, size_t data_bytes) {
  const std::vector<std::byte> file = image(header, data_bytes);
  return kiln::parse_safetensors(file, "crafted.safetensors");
}

std::vector<float> f32_values(const kiln::TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  kiln::convert_to_f32(t, out);
  return out;
}

}  // namespace

TEST_CASE("safetensors: write then read back tensors and metadata exactly", "[safetensors]") {
  TempDir dir;
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
  const std::vector<uint16_t> b = {0x3f80, 0xc000, 0x7f80, 0x0001};  // bf16 1, -2, inf, tiny subnormal
  const std::vector<int64_t> c = {-1, 0, 9007199254740993};
  const std::vector<std::byte> empty;
  kiln::write_safetensors(dir.file("m.safetensors"),
                          {{"layer.a", DType::F32, {2, 3}, std::as_bytes(std::span(a))},
                           {"layer.b", DType::BF16, {4}, std::as_bytes(std::span(b))},
                           {"ids", DType::I64, {3}, std::as_bytes(std::span(c))},
                           {"nothing", DType::F16, {0, 5}, empty}},
                          {{"format", "pt"}, {"note", "round trip"}});

  const kiln::SafetensorsFile file(dir.file("m.safetensors"));
  REQUIRE(file.tensors().size() == 4);
  CHECK(file.metadata() == std::map<std::string, std::string>{{"format", "pt"}, {"note", "round trip"}});
  CHECK(file.path() == dir.file("m.safetensors"));
  CHECK(file.find("missing") == nullptr);

  const kiln::TensorView* ta = file.find("layer.a");
  REQUIRE(ta != nullptr);
  CHECK(ta->dtype == DType::F32);
  CHECK(ta->shape == std::vector<int64_t>{2, 3});
  CHECK(ta->numel() == 6);
  REQUIRE(ta->bytes.size() == 24);
  CHECK(std::memcmp(ta->bytes.data(), a.data(), 24) == 0);
  CHECK(f32_values(*ta) == a);

  const kiln::TensorView* tb = file.find("layer.b");
  REQUIRE(tb != nullptr);
  CHECK(tb->dtype == DType::BF16);
  CHECK(std::memcmp(tb->bytes.data(), b.data(), 8) == 0);
  const kiln::TensorView* tc = file.find("ids");
  REQUIRE(tc != nullptr);
  CHECK(tc->dtype == DType::I64);
  CHECK(std::memcmp(tc->bytes.data(), c.data(), 24) == 0);
  const kiln::TensorView* tn = file.find("nothing");
  REQUIRE(tn != nullptr);
  CHECK(tn->shape == std::vector<int64_t>{0, 5});
  CHECK(tn->bytes.empty());

  // The header is padded to 8 bytes so the data buffer stays aligned in a mapping.
  std::ifstream raw(dir.file("m.safetensors"), std::ios::binary);
  uint64_t header_len = 0;
  raw.read(reinterpret_cast<char*>(&header_len), 8);
  CHECK(header_len % 8 == 0);
  CHECK(std::filesystem::file_size(dir.file("m.safetensors")) == 8 + header_len + 24 + 8 + 24);
  // No temporary file is left behind.
  CHECK_FALSE(std::filesystem::exists(dir.file("m.safetensors.partial")));
}

TEST_CASE("safetensors: writer rejects inconsistent tensors", "[safetensors]") {
  TempDir dir;
  const std::vector<float> three = {1, 2, 3};
  CHECK_KILN_ERROR(kiln::write_safetensors(dir.file("x.safetensors"), {{"t", DType::F32, {2, 2}, std::as_bytes(std::span(three))}}),
                   "\"t\"", "12 bytes", "need 16");
  CHECK_KILN_ERROR(kiln::write_safetensors(dir.file("x.safetensors"),
                                           {{"t", DType::F32, {3}, std::as_bytes(std::span(three))},
                                            {"t", DType::F32, {3}, std::as_bytes(std::span(three))}}),
                   "\"t\" is listed twice");
  CHECK_FALSE(std::filesystem::exists(dir.file("x.safetensors")));
  CHECK_FALSE(std::filesystem::exists(dir.file("x.safetensors.partial")));
}

TEST_CASE("safetensors: float conversion to fp32 and bf16", "[safetensors]") {
  // F16: 0x3c00 = 1.0, 0xc000 = -2.0, 0x0001 = 2^-24 (smallest subnormal), 0x7bff = 65504 (max).
  const std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x0001, 0x7bff};
  const kiln::TensorView t16{"h", DType::F16, {4}, std::as_bytes(std::span(f16))};
  CHECK(f32_values(t16) == std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24), 65504.0f});

  // BF16 is the top half of an fp32: 0x4049 -> 0x40490000 = 3.140625.
  const std::vector<uint16_t> bf16 = {0x4049, 0xbf80};
  const kiln::TensorView tbf{"b", DType::BF16, {2}, std::as_bytes(std::span(bf16))};
  CHECK(f32_values(tbf) == std::vector<float>{3.140625f, -1.0f});
  std::vector<uint16_t> bf16_out(2);
  kiln::convert_to_bf16(tbf, bf16_out);
  CHECK(bf16_out == bf16);

  // F64 rounds to the nearest fp32: 0.1 -> 0.1f.
  const std::vector<double> f64 = {0.1, -0.0, 2.5};
  const kiln::TensorView t64{"d", DType::F64, {3}, std::as_bytes(std::span(f64))};
  CHECK(f32_values(t64) == std::vector<float>{0.1f, -0.0f, 2.5f});

  // fp32 -> bf16 rounds to nearest even: 1 + 2^-8 is halfway between bf16 1.0 (0x3f80) and
  // 1 + 2^-7 (0x3f81) and goes to the even 0x3f80; 1 + 3*2^-8 is halfway between 0x3f81 and
  // 0x3f82 and goes to 0x3f82; 1 + 2^-8 + 2^-20 is above halfway and goes up to 0x3f81.
  const std::vector<float> f32 = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -0.0f};
  const kiln::TensorView t32{"f", DType::F32, {2, 2}, std::as_bytes(std::span(f32))};
  std::vector<uint16_t> rounded(4);
  kiln::convert_to_bf16(t32, rounded);
  CHECK(rounded == std::vector<uint16_t>{0x3f80, 0x3f82, 0x3f81, 0x8000});

  // Row ranges: rows are the last dimension.
  const std::vector<float> grid = {0, 1, 2, 10, 11, 12, 20, 21, 22};
  const kiln::TensorView tg{"grid", DType::F32, {3, 3}, std::as_bytes(std::span(grid))};
  std::vector<float> two_rows(6);
  kiln::convert_rows_to_f32(tg, 1, two_rows);
  CHECK(two_rows == std::vector<float>{10, 11, 12, 20, 21, 22});
  CHECK_KILN_ERROR(kiln::convert_rows_to_f32(tg, 2, two_rows), "\"grid\"", "row 2", "3 rows of 3");
  CHECK_KILN_ERROR(kiln::convert_rows_to_f32(tg, -1, two_rows), "row -1");
  std::vector<float> ragged(4);
  CHECK_KILN_ERROR(kiln::convert_rows_to_f32(tg, 0, ragged), "4 elements");
  std::vector<float> one_d(2);
  kiln::convert_rows_to_f32(t16, 0, std::span<float>(one_d).first(0));  // empty read is fine
  CHECK_KILN_ERROR(kiln::convert_rows_to_f32(t16, 0, one_d), "\"h\"", "1 rows of 4");

  std::vector<float> wrong_size(3);
  CHECK_KILN_ERROR(kiln::convert_to_f32(t32, wrong_size), "\"f\"", "3 elements", "has 4");
  const std::vector<int32_t> ints = {1, 2};
  const kiln::TensorView ti{"ints", DType::I32, {2}, std::as_bytes(std::span(ints))};
  std::vector<float> two(2);
  CHECK_KILN_ERROR(kiln::convert_to_f32(ti, two), "\"ints\"", "I32", "not a float type");
}

TEST_CASE("safetensors: parses a hand-written header", "[safetensors]") {
  // Listed out of data order on purpose: the result is in data-buffer order.
  const auto tensors = parse(R"({"b":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},)"
                             R"("a":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},)"
                             R"("__metadata__":{"k":"v"}})",
                             12);
  REQUIRE(tensors.size() == 2);
  CHECK(tensors[0].name == "a");
  CHECK(tensors[0].shape == std::vector<int64_t>{1, 2});
  CHECK(tensors[1].name == "b");
  CHECK(tensors[1].bytes.size() == 4);
  // A scalar (shape []) has one element; trailing spaces (writers pad headers) are fine.
  const auto scalar = parse(R"({"s":{"dtype":"I8","shape":[],"data_offsets":[0,1]}}    )", 1);
  REQUIRE(scalar.size() == 1);
  CHECK(scalar[0].numel() == 1);
  CHECK(parse("{}", 0).empty());
}

TEST_CASE("safetensors: rejects malformed files", "[safetensors]") {
  const std::string ok_entry = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";

  SECTION("file shorter than the 8-byte length") {
    const std::vector<std::byte> tiny(5);
    CHECK_KILN_ERROR(kiln::parse_safetensors(tiny, "tiny.st"), "tiny.st", "5 bytes", "shorter than");
  }
  SECTION("header length beyond the file") {
    const auto file = image("{}", 10, 100);
    CHECK_KILN_ERROR(kiln::parse_safetensors(file, "long.st"), "long.st", "header length 100", "past the end");
    const auto huge = image("{}", 0, ~uint64_t{0});
    CHECK_KILN_ERROR(kiln::parse_safetensors(huge, "huge.st"), "header length 18446744073709551615");
  }
  SECTION("header length over the format's 100 MB limit, even where the file is that long") {
    const auto file = image("{}", 0, 100'000'001);
    CHECK_KILN_ERROR(kiln::parse_safetensors(file, "big.st"), "big.st", "header length 100000001",
                     "over the format's limit of 100000000 bytes");
  }
  SECTION("bad JSON or a header that is not an object") {
    CHECK_KILN_ERROR(parse("{not json", 0), "crafted.safetensors", "not valid JSON");
    CHECK_KILN_ERROR(parse("[1, 2]", 0), "must be a JSON object", "array");
    CHECK_KILN_ERROR(parse("", 0), "not valid JSON");
  }
  SECTION("entry missing a field") {
    CHECK_KILN_ERROR(parse(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", 8), "\"t\"", "missing field \"dtype\"");
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", 8), "\"t\"", "missing field \"shape\"");
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F32","shape":[2]}})", 8), "\"t\"", "missing field \"data_offsets\"");
  }
  SECTION("fields of the wrong JSON type") {
    CHECK_KILN_ERROR(parse(R"({"t":7})", 0), "\"t\"", "entry must be a JSON object");
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":5,"shape":[2],"data_offsets":[0,8]}})", 8), "\"dtype\" must be a string");
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", 8), "\"shape\" must be an array");
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":{"a":0}}})", 8), "\"data_offsets\" must be an array");
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8), "\"data_offsets\" must be an array [begin, end]");
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":["0",8]}})", 8), "must be non-negative integers");
  }
  SECTION("unknown or unsupported dtype") {
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F7","shape":[2],"data_offsets":[0,8]}})", 8), "\"t\"", "unsupported dtype \"F7\"");
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"U32","shape":[2],"data_offsets":[0,8]}})", 8), "unsupported dtype \"U32\"");
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", 8), "unsupported dtype \"f32\"");
  }
  SECTION("negative or non-integer dims") {
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,8]}})", 8), "shape[0] = -1", "not a non-negative integer");
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F32","shape":[2,2.5],"data_offsets":[0,8]}})", 8), "shape[1] = 2.5");
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8), "shape[0] = 2.0");
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F32","shape":[true],"data_offsets":[0,8]}})", 8), "shape[0] = true");
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]}})", 8), "shape[0]");
  }
  SECTION("shape times dtype size differs from the byte length") {
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "\"t\"", "span 8 bytes", "needs 12");
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,4]}})", 4), "span 4 bytes", "needs 8");
  }
  SECTION("overflow in the shape product or the byte size") {
    // 2^40 * 2^40 = 2^80 elements; 2^62 F32 elements = 2^64 bytes.
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}})", 8),
                     "\"t\"", "overflows");
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,8]}})", 8),
                     "\"t\"", "byte size", "overflows");
  }
  SECTION("offsets end before begin, past the data, overlapping, or leaving gaps") {
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8), "end 0 < begin 8");
    CHECK_KILN_ERROR(parse("{\"t\":{" + ok_entry + "}}", 4), "\"t\"", "past the end of the data buffer (4 bytes)");
    CHECK_KILN_ERROR(parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           12),
                     "\"b\"", "overlap tensor \"a\"");
    CHECK_KILN_ERROR(parse(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                           12),
                     "gap", "[4, 8)", "\"b\"");
    CHECK_KILN_ERROR(parse(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "gap", "[0, 4)");
    CHECK_KILN_ERROR(parse("{\"t\":{" + ok_entry + "}}", 9), "9 bytes", "cover only 8");
  }
  SECTION("duplicate tensor names and duplicate fields") {
    CHECK_KILN_ERROR(parse("{\"t\":{" + ok_entry + "},\"t\":{" + ok_entry + "}}", 8), "duplicate JSON key \"t\"");
    CHECK_KILN_ERROR(parse(R"({"t":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})", 8),
                     "duplicate JSON key \"dtype\"");
  }
  SECTION("__metadata__ that is not an object of strings") {
    CHECK_KILN_ERROR(parse(R"({"__metadata__":{"format":"pt","n":1}})", 0), "\"__metadata__\" value of \"n\"", "string");
    CHECK_KILN_ERROR(parse(R"({"__metadata__":["pt"]})", 0), "\"__metadata__\" must be an object");
  }
}

TEST_CASE("safetensors: every truncation of a valid file is rejected cleanly", "[safetensors]") {
  TempDir dir;
  const std::vector<float> v = {1, 2, 3, 4, 5};
  kiln::write_safetensors(dir.file("v.safetensors"), {{"v", DType::F32, {5}, std::as_bytes(std::span(v))}});
  const kiln::MappedFile mapped(dir.file("v.safetensors"));
  const auto full = mapped.bytes();
  CHECK(kiln::parse_safetensors(full, "v").size() == 1);
  for (size_t n = 0; n < full.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    CHECK_THROWS_AS(kiln::parse_safetensors(full.first(n), "v"), kiln::Error);
  }
}

TEST_CASE("safetensors: model directories, single-file and sharded", "[safetensors]") {
  TempDir dir;
  const std::vector<float> a = {1, 2}, b = {3, 4, 5}, c = {6};
  const auto bytes = [](const std::vector<float>& x) { return std::as_bytes(std::span(x)); };
  const auto write_index = [&](const std::string& json) {
    std::ofstream(dir.file("model.safetensors.index.json")) << json;
  };

  SECTION("no weights at all") {
    CHECK_KILN_ERROR(kiln::SafetensorsDir(dir.path().string()), dir.path().string(), "no model.safetensors");
  }
  SECTION("single file") {
    kiln::write_safetensors(dir.file("model.safetensors"), {{"x", DType::F32, {2}, bytes(a)}});
    const kiln::SafetensorsDir model(dir.path().string());
    CHECK(model.names() == std::vector<std::string>{"x"});
    REQUIRE(model.find("x") != nullptr);
    CHECK(f32_values(*model.find("x")) == a);
  }
  SECTION("shards listed by the index") {
    kiln::write_safetensors(dir.file("model-00001-of-00002.safetensors"),
                            {{"w.b", DType::F32, {3}, bytes(b)}, {"w.a", DType::F32, {2}, bytes(a)}});
    kiln::write_safetensors(dir.file("model-00002-of-00002.safetensors"), {{"w.c", DType::F32, {1}, bytes(c)}});
    write_index(R"({"metadata":{"total_size":24},"weight_map":{
        "w.b":"model-00001-of-00002.safetensors","w.c":"model-00002-of-00002.safetensors",
        "w.a":"model-00001-of-00002.safetensors"}})");
    const kiln::SafetensorsDir model(dir.path().string());
    CHECK(model.names() == std::vector<std::string>{"w.a", "w.b", "w.c"});
    CHECK(f32_values(*model.find("w.a")) == a);
    CHECK(f32_values(*model.find("w.b")) == b);
    CHECK(f32_values(*model.find("w.c")) == c);
    CHECK(model.find("w.d") == nullptr);
  }
  SECTION("index naming a missing shard") {
    kiln::write_safetensors(dir.file("s1.safetensors"), {{"w.a", DType::F32, {2}, bytes(a)}});
    write_index(R"({"weight_map":{"w.a":"s1.safetensors","w.z":"s9.safetensors"}})");
    CHECK_KILN_ERROR(kiln::SafetensorsDir(dir.path().string()), "model.safetensors.index.json", "shard \"s9.safetensors\"",
                     "tensor \"w.z\"", "does not exist");
  }
  SECTION("index mapping a tensor to a shard that lacks it") {
    kiln::write_safetensors(dir.file("s1.safetensors"), {{"w.a", DType::F32, {2}, bytes(a)}});
    write_index(R"({"weight_map":{"w.a":"s1.safetensors","w.b":"s1.safetensors"}})");
    CHECK_KILN_ERROR(kiln::SafetensorsDir(dir.path().string()), "tensor \"w.b\"", "shard \"s1.safetensors\"",
                     "has no such tensor");
  }
  SECTION("malformed index") {
    write_index(R"({"weight_map":{"w.a":"../elsewhere.safetensors"}})");
    CHECK_KILN_ERROR(kiln::SafetensorsDir(dir.path().string()), "not a plain file name");
    write_index(R"({"weight_map":{"w.a":3}})");
    CHECK_KILN_ERROR(kiln::SafetensorsDir(dir.path().string()), "\"w.a\"", "must be a shard file name");
    write_index(R"({"weights":{}})");
    CHECK_KILN_ERROR(kiln::SafetensorsDir(dir.path().string()), "\"weight_map\"");
    write_index(R"({"weight_map":{"w.a":"s1.safetensors","w.a":"s2.safetensors"}})");
    CHECK_KILN_ERROR(kiln::SafetensorsDir(dir.path().string()), "duplicate JSON key \"w.a\"");
  }
  SECTION("a shard that is itself malformed names the shard") {
    kiln::test::write_file(dir.file("bad.safetensors"), image("{oops", 0));
    write_index(R"({"weight_map":{"w.a":"bad.safetensors"}})");
    CHECK_KILN_ERROR(kiln::SafetensorsDir(dir.path().string()), "bad.safetensors", "not valid JSON");
  }
}

// Issue 13, defect 7: a FIFO given as a shard hung the loader, which opened it (blocking until a
// writer came) before checking it was a regular file. If the loader blocks, a helper opens the
// FIFO's write end after two seconds, so the test fails instead of hanging.
TEST_CASE("safetensors: a FIFO given as a shard or index is refused without blocking", "[safetensors]") {
  TempDir dir;
  const std::vector<float> a = {1, 2};
  kiln::write_safetensors(dir.file("s1.safetensors"), {{"w.a", DType::F32, {2}, std::as_bytes(std::span(a))}});
  const auto refused_without_blocking = [](const std::string& fifo, const std::function<void()>& load) {
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    std::atomic<bool> done{false}, unblocked{false};
    std::thread unblocker([&] {
      for (int i = 0; i < 200 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (done) return;
      unblocked = true;
      const int fd = ::open(fifo.c_str(), O_WRONLY);  // lets the blocked open() return
      if (fd >= 0) ::close(fd);
    });
    CHECK_KILN_ERROR(load(), fifo, "not a regular file");
    done = true;
    unblocker.join();
    CHECK_FALSE(unblocked);
  };
  SECTION("a shard") {
    std::ofstream(dir.file("model.safetensors.index.json"))
        << R"({"weight_map":{"w.a":"s1.safetensors","w.b":"fifo.safetensors"}})";
    refused_without_blocking(dir.file("fifo.safetensors"), [&] { kiln::SafetensorsDir(dir.path().string()); });
  }
  SECTION("the single model file") {
    refused_without_blocking(dir.file("model.safetensors"), [&] { kiln::SafetensorsDir(dir.path().string()); });
  }
  SECTION("the index") {
    refused_without_blocking(dir.file("model.safetensors.index.json"), [&] { kiln::SafetensorsDir(dir.path().string()); });
  }
}
