// GGUF -> HF mapping (llama and qwen3 architectures) and gguf-to-hf, on a tiny crafted model whose
// HF weights are known exactly (so the undone q/k permutation is checked value by value) and on the
// real SmolLM2.
#include <algorithm>
#include <bit>
#include <fstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "runtime/weights/dequant.hpp"
#include "runtime/weights/gguf_model.hpp"
#include "runtime/weights/gguf_to_hf.hpp"
#include "runtime/weights/safetensors.hpp"
#include "test_support.hpp"

using kiln::GgufFile;
using kiln::test::GgufBuilder;
using kiln::test::TempDir;
using kiln::test::kF32;
using kiln::test::kF16;
using kiln::test::kQ8_0;
using kiln::test::kIQ4_NL;

namespace {

using kiln::test::permute_rows_like_llama_cpp;

// Values chosen to be exact in the storage type, distinct across tensors where the type allows.
float value_for(uint32_t type, int64_t tensor_id, int64_t i) {
  switch (type) {
    case kF16: return static_cast<float>((i * 5 + tensor_id) % 1024 - 512);
    case kQ8_0: return static_cast<float>((i * 7 + tensor_id) % 201 - 100);  // with d = 1
    default: return static_cast<float>(tensor_id * 100000 + i);
  }
}

std::vector<std::byte> encode(uint32_t type, const std::vector<float>& values) {
  std::vector<std::byte> out;
  const auto push16 = [&](uint16_t v) {
    out.push_back(std::byte(v & 0xff));
    out.push_back(std::byte(v >> 8));
  };
  if (type == kF32) return kiln::test::to_bytes(values);
  if (type == kF16) {
    for (float v : values) push16(kiln::f32_to_f16(v));
    return out;
  }
  REQUIRE(type == kQ8_0);
  for (size_t b = 0; b < values.size(); b += 32) {
    push16(0x3c00);  // d = 1
    for (size_t j = 0; j < 32; ++j) out.push_back(std::byte(static_cast<uint8_t>(static_cast<int8_t>(values[b + j]))));
  }
  return out;
}

// A 2-layer Llama (or Qwen3): hidden 32, 4 heads, 2 kv heads, head_dim 8, ffn 64, vocab 10.
struct TinyLlama {
  static constexpr int64_t kHidden = 32, kHeads = 4, kKvHeads = 2, kHeadDim = 8, kFfn = 64, kVocab = 10, kLayers = 2;
  struct Tensor {
    std::string gguf_name, hf_name;
    std::vector<int64_t> shape;  // torch order
    uint32_t type;
    int64_t permute_heads;
    std::vector<float> hf;       // the HF values, row-major in `shape`
  };
  std::vector<Tensor> tensors;
  GgufBuilder gguf;
  bool tied = true;

  // arch "qwen3": the same shapes as llama.cpp writes a Qwen3 model: keys under qwen3.*, q/k rows
  // not permuted, per-head q/k norm weights.
  explicit TinyLlama(bool tie = true, std::string arch = "llama") : tied(tie) {
    const bool qwen3 = arch == "qwen3";
    const auto key = [&](const char* suffix) { return arch + "." + suffix; };
    gguf.kv_string("general.architecture", arch);
    gguf.kv_u32(key("embedding_length"), kHidden);
    gguf.kv_u32(key("block_count"), kLayers);
    gguf.kv_u32(key("attention.head_count"), kHeads);
    gguf.kv_u32(key("attention.head_count_kv"), kKvHeads);
    gguf.kv_u32(key("feed_forward_length"), kFfn);
    gguf.kv_u32(key("context_length"), 128);
    gguf.kv_f32(key("attention.layer_norm_rms_epsilon"), 1e-6f);
    gguf.kv_f32(key("rope.freq_base"), 500000.0f);
    gguf.kv_u32(key("rope.dimension_count"), kHeadDim);
    gguf.kv_string_array("tokenizer.ggml.tokens", {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"});
    gguf.kv_u32("tokenizer.ggml.bos_token_id", 1);
    gguf.kv_u32("tokenizer.ggml.eos_token_id", 2);

    add("token_embd.weight", "model.embed_tokens.weight", {kVocab, kHidden}, kF32, 0);
    for (int64_t l = 0; l < kLayers; ++l) {
      const std::string g = "blk." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
      // Layer 1 stores q as Q8_0 and v as F16, so the permutation is checked on a block type too.
      add(g + "attn_q.weight", h + "self_attn.q_proj.weight", {kHeads * kHeadDim, kHidden}, l == 1 ? kQ8_0 : kF32,
          qwen3 ? 0 : kHeads);
      add(g + "attn_k.weight", h + "self_attn.k_proj.weight", {kKvHeads * kHeadDim, kHidden}, kF32, qwen3 ? 0 : kKvHeads);
      if (qwen3) {
        add(g + "attn_q_norm.weight", h + "self_attn.q_norm.weight", {kHeadDim}, kF32, 0);
        add(g + "attn_k_norm.weight", h + "self_attn.k_norm.weight", {kHeadDim}, kF32, 0);
      }
      add(g + "attn_v.weight", h + "self_attn.v_proj.weight", {kKvHeads * kHeadDim, kHidden}, l == 1 ? kF16 : kF32, 0);
      add(g + "attn_output.weight", h + "self_attn.o_proj.weight", {kHidden, kHeads * kHeadDim}, kF32, 0);
      add(g + "attn_norm.weight", h + "input_layernorm.weight", {kHidden}, kF32, 0);
      add(g + "ffn_gate.weight", h + "mlp.gate_proj.weight", {kFfn, kHidden}, kF32, 0);
      add(g + "ffn_up.weight", h + "mlp.up_proj.weight", {kFfn, kHidden}, kF32, 0);
      add(g + "ffn_down.weight", h + "mlp.down_proj.weight", {kHidden, kFfn}, kF32, 0);
      add(g + "ffn_norm.weight", h + "post_attention_layernorm.weight", {kHidden}, kF32, 0);
    }
    add("output_norm.weight", "model.norm.weight", {kHidden}, kF32, 0);
    if (!tied) add("output.weight", "lm_head.weight", {kVocab, kHidden}, kF16, 0);
  }

  void add(const std::string& gguf_name, const std::string& hf_name, std::vector<int64_t> shape, uint32_t type,
           int64_t permute_heads) {
    const int64_t id = static_cast<int64_t>(tensors.size()) + 1;
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    std::vector<float> hf(static_cast<size_t>(numel));
    for (int64_t i = 0; i < numel; ++i) hf[i] = value_for(type, id, i);
    const std::vector<float> stored =
        permute_heads ? permute_rows_like_llama_cpp(hf, shape[0], shape.back(), permute_heads) : hf;
    gguf.tensor(gguf_name, std::vector<uint64_t>(shape.rbegin(), shape.rend()), type, encode(type, stored));
    tensors.push_back({gguf_name, hf_name, std::move(shape), type, permute_heads, std::move(hf)});
  }

  const Tensor& by_hf_name(const std::string& name) const {
    for (const Tensor& t : tensors) {
      if (t.hf_name == name) return t;
    }
    FAIL("no tensor " << name);
    throw;
  }
};

std::vector<float> read_all(const kiln::HfTensorSource& s) {
  std::vector<float> out(static_cast<size_t>(s.numel()), -12345.0f);
  s.read_f32(out);
  return out;
}

}  // namespace

TEST_CASE("gguf_llama: the q/k row permutation and its inverse", "[gguf_llama]") {
  // head_dim 4: HF rows (s, i) = (0,0) (0,1) (1,0) (1,1) are stored as GGUF rows (i, s) order:
  // HF 0 -> GGUF 0, HF 1 -> GGUF 2, HF 2 -> GGUF 1, HF 3 -> GGUF 3; the next head is offset by 4.
  const std::vector<int64_t> expected = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int64_t r = 0; r < 8; ++r) CHECK(kiln::llama_gguf_row_of_hf_row(r, 4) == expected[r]);
  // Against the forward permutation for a bigger head: every HF row lands where permute put it.
  const int64_t heads = 3, head_dim = 64, rows = heads * head_dim;
  std::vector<float> hf(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) hf[r] = static_cast<float>(r);
  const std::vector<float> stored = permute_rows_like_llama_cpp(hf, rows, 1, heads);
  for (int64_t r = 0; r < rows; ++r) CHECK(stored[kiln::llama_gguf_row_of_hf_row(r, head_dim)] == hf[r]);
}

TEST_CASE("gguf_llama: hyperparameters and HF tensors of a crafted tiny Llama", "[gguf_llama]") {
  TinyLlama tiny;
  const std::vector<std::byte> image = tiny.gguf.build();
  const GgufFile f = GgufFile::parse(image, "tiny.gguf");

  const kiln::GgufHyperparams hp = kiln::read_gguf_hyperparams(f);
  CHECK(hp.hidden_size == 32);
  CHECK(hp.num_hidden_layers == 2);
  CHECK(hp.num_attention_heads == 4);
  CHECK(hp.num_key_value_heads == 2);
  CHECK(hp.head_dim == 8);
  CHECK(hp.intermediate_size == 64);
  CHECK(hp.max_position_embeddings == 128);
  CHECK(hp.vocab_size == 10);  // from the token list: no llama.vocab_size key
  CHECK(hp.rms_norm_eps == 1e-6);      // the shortest decimal of 1e-6f, not 9.9999999747524271e-07
  CHECK(hp.rope_theta == 500000.0);
  CHECK_FALSE(hp.rope_scaling.has_value());
  CHECK_FALSE(hp.has_rope_freqs);
  CHECK(hp.tie_word_embeddings);
  CHECK(hp.bos_token_id == 1);
  CHECK(hp.eos_token_id == 2);

  const std::vector<kiln::HfTensorSource> sources = kiln::gguf_hf_tensors(f, hp);
  REQUIRE(sources.size() == 2 + 9 * 2);
  CHECK(sources.front().hf_name == "model.embed_tokens.weight");
  CHECK(sources[1].hf_name == "model.layers.0.input_layernorm.weight");
  CHECK(sources[2].hf_name == "model.layers.0.self_attn.q_proj.weight");
  CHECK(sources.back().hf_name == "model.norm.weight");
  for (const kiln::HfTensorSource& s : sources) {
    INFO(s.hf_name);
    const TinyLlama::Tensor& t = tiny.by_hf_name(s.hf_name);
    CHECK(s.shape == t.shape);
    CHECK(s.gguf->name == t.gguf_name);
    CHECK(s.unpermute_heads == t.permute_heads);
    CHECK(read_all(s) == t.hf);  // exact: the permutation is undone and every type decodes exactly
  }

  // The permutation really moved rows (so the check above is not vacuous): HF q row 1 is GGUF row 2.
  const kiln::HfTensorSource& q0 = sources[2];
  std::vector<float> stored(static_cast<size_t>(q0.numel()));
  kiln::dequantize(q0.gguf->type, q0.gguf->bytes, stored);
  const std::vector<float> hf_q = read_all(q0);
  CHECK(std::vector<float>(stored.begin() + 32, stored.begin() + 64) != std::vector<float>(hf_q.begin() + 32, hf_q.begin() + 64));
  CHECK(std::vector<float>(stored.begin() + 64, stored.begin() + 96) == std::vector<float>(hf_q.begin() + 32, hf_q.begin() + 64));

  // Reading a row range gives the same rows as reading everything.
  for (const kiln::HfTensorSource* s : {&sources[2], &sources[11], &sources[12]}) {
    INFO(s->hf_name);
    const std::vector<float> all = read_all(*s);
    std::vector<float> rows(3 * 32);
    s->read_rows_f32(5, rows);
    CHECK(rows == std::vector<float>(all.begin() + 5 * 32, all.begin() + 8 * 32));
  }
  std::vector<float> too_many(4 * 32);
  CHECK_KILN_ERROR(sources[2].read_rows_f32(30, too_many), "q_proj", "row 30");
  std::vector<float> wrong(7);
  CHECK_KILN_ERROR(sources[2].read_f32(wrong), "q_proj", "7 elements");
}

TEST_CASE("gguf_llama: untied output and rope scaling metadata", "[gguf_llama]") {
  TinyLlama tiny(/*tie=*/false);
  tiny.gguf.kv_u32("llama.vocab_size", 10);
  tiny.gguf.kv_string("llama.rope.scaling.type", "linear");
  tiny.gguf.kv_f32("llama.rope.scaling.factor", 2.0f);
  const std::vector<std::byte> image = tiny.gguf.build();
  const GgufFile f = GgufFile::parse(image, "tiny.gguf");
  const kiln::GgufHyperparams hp = kiln::read_gguf_hyperparams(f);
  CHECK_FALSE(hp.tie_word_embeddings);
  REQUIRE(hp.rope_scaling.has_value());
  CHECK(hp.rope_scaling->type == "linear");
  CHECK(hp.rope_scaling->factor == 2.0);
  const auto sources = kiln::gguf_hf_tensors(f, hp);
  REQUIRE(sources.size() == 21);
  CHECK(sources.back().hf_name == "lm_head.weight");
  CHECK(read_all(sources.back()) == tiny.by_hf_name("lm_head.weight").hf);

  const nlohmann::json config = kiln::gguf_hf_config(hp, kiln::DType::F32);
  CHECK(config["rope_scaling"] == nlohmann::json{{"rope_type", "linear"}, {"factor", 2.0}});
  CHECK(config["tie_word_embeddings"] == false);
}

TEST_CASE("gguf_model: a Qwen3 file: qwen3.* keys, per-head q/k norms, rows as stored", "[gguf_model]") {
  TinyLlama tiny(/*tie=*/false, "qwen3");
  const std::vector<std::byte> image = tiny.gguf.build();
  const GgufFile f = GgufFile::parse(image, "qwen3.gguf");
  const kiln::GgufHyperparams hp = kiln::read_gguf_hyperparams(f);
  CHECK(hp.architecture == "qwen3");
  CHECK(hp.model_type == "qwen3");
  CHECK(hp.qk_norm);
  CHECK_FALSE(hp.rope_permuted);
  CHECK(hp.hidden_size == 32);
  CHECK(hp.head_dim == 8);
  CHECK(hp.rope_theta == 500000.0);
  const std::vector<kiln::HfTensorSource> sources = kiln::gguf_hf_tensors(f, hp);
  REQUIRE(sources.size() == 3 + 11 * 2);
  for (const kiln::HfTensorSource& s : sources) {
    INFO(s.hf_name);
    const TinyLlama::Tensor& t = tiny.by_hf_name(s.hf_name);
    CHECK(s.shape == t.shape);
    CHECK(s.unpermute_heads == 0);  // llama.cpp's converter permutes llama's q/k only
    CHECK(read_all(s) == t.hf);
  }
  CHECK(tiny.by_hf_name("model.layers.1.self_attn.k_norm.weight").shape == std::vector<int64_t>{8});
  const nlohmann::json config = kiln::gguf_hf_config(hp, kiln::DType::F32);
  CHECK(config["model_type"] == "qwen3");
  CHECK(config["architectures"] == nlohmann::json{"Qwen3ForCausalLM"});

  // A Qwen3 file without its q/k norms is incomplete, and a llama file with them names them.
  TinyLlama missing(false, "qwen3");
  auto& stored = missing.gguf.tensors;
  stored.erase(std::find_if(stored.begin(), stored.end(), [](const auto& t) { return t.name == "blk.0.attn_q_norm.weight"; }));
  const std::vector<std::byte> missing_image = missing.gguf.build();
  const GgufFile mf = GgufFile::parse(missing_image, "m.gguf");
  CHECK_KILN_ERROR(kiln::gguf_hf_tensors(mf, kiln::read_gguf_hyperparams(mf)), "\"blk.0.attn_q_norm.weight\"", "missing");
  TinyLlama extra;
  extra.gguf.tensor("blk.0.attn_q_norm.weight", {8}, kF32, std::vector<std::byte>(32));
  const std::vector<std::byte> extra_image = extra.gguf.build();
  const GgufFile ef = GgufFile::parse(extra_image, "e.gguf");
  CHECK_KILN_ERROR(kiln::gguf_hf_tensors(ef, kiln::read_gguf_hyperparams(ef)), "\"blk.0.attn_q_norm.weight\"",
                   "not part of a 2-layer llama model");
}

TEST_CASE("gguf_llama: rejects files that are not a consistent Llama", "[gguf_llama]") {
  const auto hyperparams_of = [](TinyLlama& t) {
    const std::vector<std::byte> image = t.gguf.build();
    return kiln::read_gguf_hyperparams(GgufFile::parse(image, "tiny.gguf"));
  };
  const auto tensors_of = [](TinyLlama& t) {
    const std::vector<std::byte> image = t.gguf.build();
    const GgufFile f = GgufFile::parse(image, "tiny.gguf");
    return kiln::gguf_hf_tensors(f, kiln::read_gguf_hyperparams(f)).size();
  };

  SECTION("an architecture kiln does not read") {
    for (const char* arch : {"qwen2", "gpt2", "deepseek3"}) {
      GgufBuilder g;
      g.kv_string("general.architecture", arch);
      const auto image = g.build();
      CHECK_KILN_ERROR(kiln::read_gguf_hyperparams(GgufFile::parse(image, "q.gguf")), "q.gguf",
                       "\"" + std::string(arch) + "\"",
                       "\"llama\" (Llama, SmolLM2), \"qwen3\" and \"deepseek2\"");
    }
  }
  SECTION("a missing hyperparameter") {
    GgufBuilder g;
    g.kv_string("general.architecture", "llama");
    g.kv_u32("llama.embedding_length", 32);
    const auto image = g.build();
    CHECK_KILN_ERROR(kiln::read_gguf_hyperparams(GgufFile::parse(image, "m.gguf")), "\"llama.block_count\"", "missing");
  }
  SECTION("inconsistent head counts or dims") {
    TinyLlama a;
    a.gguf.kv_u32("llama.rope.dimension_count", 4);  // duplicate key: the parser catches it first
    CHECK_KILN_ERROR(hyperparams_of(a), "duplicate key");
    TinyLlama b;
    b.gguf.kv_u32("llama.attention.key_length", 6);
    b.gguf.kv_u32("llama.attention.value_length", 8);
    CHECK_KILN_ERROR(hyperparams_of(b), "value_length 8", "key_length 6");
    TinyLlama c;
    c.gguf.kv_u32("llama.vocab_size", 11);
    CHECK_KILN_ERROR(hyperparams_of(c), "token_embd.weight has 10 rows", "11 tokens");
    TinyLlama d;
    d.gguf.kv_string("llama.rope.scaling.type", "longrope");
    CHECK_KILN_ERROR(hyperparams_of(d), "\"longrope\"", "not supported");
  }
  SECTION("a missing layer tensor") {
    TinyLlama t;
    REQUIRE(t.tensors[16].gguf_name == "blk.1.ffn_up.weight");
    t.gguf.tensors.erase(t.gguf.tensors.begin() + 16);  // later offsets stay increasing: still a valid GGUF
    CHECK_KILN_ERROR(tensors_of(t), "\"blk.1.ffn_up.weight\"", "model.layers.1.mlp.up_proj.weight", "missing");
  }
  SECTION("a tensor kiln does not map, or a layer beyond block_count") {
    TinyLlama t;
    t.gguf.tensor("blk.2.attn_q.weight", {32, 32}, kF32, std::vector<std::byte>(4096));
    CHECK_KILN_ERROR(tensors_of(t), "\"blk.2.attn_q.weight\"", "not part of a 2-layer llama model");
    TinyLlama u;
    u.gguf.tensor("blk.0.attn_q.bias", {32}, kF32, std::vector<std::byte>(128));
    CHECK_KILN_ERROR(tensors_of(u), "\"blk.0.attn_q.bias\"");
  }
  SECTION("a wrong shape") {
    TinyLlama t;
    t.gguf.tensors[3].ne = {32, 8};  // blk.0.attn_v.weight should be [16, 32] in torch order
    REQUIRE(t.tensors[3].gguf_name == "blk.0.attn_v.weight");
    CHECK_KILN_ERROR(tensors_of(t), "\"blk.0.attn_v.weight\"", "torch shape [8, 32]", "expected [16, 32]");
  }
  SECTION("a type kiln cannot dequantize") {
    TinyLlama t;
    t.gguf.tensors[6].type = kIQ4_NL;  // blk.0.ffn_gate.weight, [64, 32]: whole IQ4_NL blocks
    REQUIRE(t.tensors[6].gguf_name == "blk.0.ffn_gate.weight");
    CHECK_KILN_ERROR(tensors_of(t), "\"blk.0.ffn_gate.weight\"", "IQ4_NL", "cannot read", "Q5_0", "llama-quantize");
  }
}

TEST_CASE("gguf-to-hf: converts the tiny Llama to config.json + model.safetensors", "[gguf_llama]") {
  TinyLlama tiny;
  TempDir dir;
  kiln::test::write_file(dir.file("tiny.gguf"), tiny.gguf.build());

  SECTION("f32: exactly the HF weights") {
    kiln::convert_gguf_to_hf(dir.file("tiny.gguf"), dir.file("hf"), kiln::DType::F32);
    const kiln::SafetensorsDir model(dir.file("hf"));
    REQUIRE(model.names().size() == tiny.tensors.size());
    for (const TinyLlama::Tensor& t : tiny.tensors) {
      INFO(t.hf_name);
      const kiln::TensorView* v = model.find(t.hf_name);
      REQUIRE(v != nullptr);
      CHECK(v->dtype == kiln::DType::F32);
      CHECK(v->shape == t.shape);
      std::vector<float> values(static_cast<size_t>(v->numel()));
      kiln::convert_to_f32(*v, values);
      CHECK(values == t.hf);
    }
    std::ifstream config_file(dir.file("hf/config.json"));
    const nlohmann::json config = nlohmann::json::parse(config_file);
    CHECK(config["architectures"] == nlohmann::json::array({"LlamaForCausalLM"}));
    CHECK(config["model_type"] == "llama");
    CHECK(config["hidden_size"] == 32);
    CHECK(config["intermediate_size"] == 64);
    CHECK(config["num_hidden_layers"] == 2);
    CHECK(config["num_attention_heads"] == 4);
    CHECK(config["num_key_value_heads"] == 2);
    CHECK(config["head_dim"] == 8);
    CHECK(config["max_position_embeddings"] == 128);
    CHECK(config["vocab_size"] == 10);
    CHECK(config["rms_norm_eps"] == 1e-6);
    CHECK(config["rope_theta"] == 500000.0);
    CHECK(config["rope_scaling"].is_null());
    CHECK(config["tie_word_embeddings"] == true);
    CHECK(config["torch_dtype"] == "float32");
    CHECK(config["bos_token_id"] == 1);
    CHECK(config["eos_token_id"] == 2);
  }
  SECTION("bf16: the same weights rounded to nearest even") {
    kiln::convert_gguf_to_hf(dir.file("tiny.gguf"), dir.file("hf16"), kiln::DType::BF16);
    const kiln::SafetensorsDir model(dir.file("hf16"));
    const TinyLlama::Tensor& q = tiny.by_hf_name("model.layers.0.self_attn.q_proj.weight");
    const kiln::TensorView* v = model.find(q.hf_name);
    REQUIRE(v != nullptr);
    CHECK(v->dtype == kiln::DType::BF16);
    std::vector<uint16_t> got(static_cast<size_t>(v->numel()));
    kiln::convert_to_bf16(*v, got);
    std::vector<uint16_t> want;
    for (float x : q.hf) want.push_back(kiln::f32_to_bf16(x));
    CHECK(got == want);
    std::ifstream config_file(dir.file("hf16/config.json"));
    CHECK(nlohmann::json::parse(config_file)["torch_dtype"] == "bfloat16");
  }
  SECTION("Llama-3.1 rope_freqs cannot be expressed and is refused") {
    TinyLlama t;
    t.gguf.tensor("rope_freqs.weight", {4}, kF32, std::vector<std::byte>(16));
    kiln::test::write_file(dir.file("freqs.gguf"), t.gguf.build());
    CHECK_KILN_ERROR(kiln::convert_gguf_to_hf(dir.file("freqs.gguf"), dir.file("out"), kiln::DType::F32),
                     "freqs.gguf", "rope_freqs.weight");
    CHECK_FALSE(std::filesystem::exists(dir.file("out/model.safetensors")));
  }
}

TEST_CASE("gguf_llama: the real SmolLM2-135M-Instruct Q4_1 file", "[gguf_llama][real]") {
  const auto path = kiln::test::cached_smollm2();
  if (!path) {
    WARN("SKIPPED: SmolLM2 GGUF not in the kiln cache (run tools/fetch-smollm2)");
    return;
  }
  const GgufFile f(*path);
  const kiln::GgufHyperparams hp = kiln::read_gguf_hyperparams(f);
  // SmolLM2-135M's HF config.
  CHECK(hp.hidden_size == 576);
  CHECK(hp.num_hidden_layers == 30);
  CHECK(hp.num_attention_heads == 9);
  CHECK(hp.num_key_value_heads == 3);
  CHECK(hp.head_dim == 64);
  CHECK(hp.intermediate_size == 1536);
  CHECK(hp.max_position_embeddings == 8192);
  CHECK(hp.vocab_size == 49152);
  CHECK(hp.rms_norm_eps == 1e-5);
  CHECK(hp.rope_theta == 100000.0);
  CHECK(hp.tie_word_embeddings);
  CHECK_FALSE(hp.rope_scaling.has_value());

  const auto sources = kiln::gguf_hf_tensors(f, hp);
  REQUIRE(sources.size() == 272);
  // fp32 bit patterns from transformers' own GGUF loader (load_gguf_checkpoint, which dequantizes
  // with gguf-py and undoes the q/k permutation): first elements of the given HF rows.
  struct Spot {
    const char* name;
    int64_t row;
    std::vector<uint32_t> bits;
  };
  const Spot spots[] = {
      {"model.embed_tokens.weight", 1, {0xbcc30000u, 0xbc820000u, 0xbd228000u, 0x3c820000u, 0xbde38000u, 0xbc020000u, 0xbd820000u, 0x3d924000u}},
      {"model.embed_tokens.weight", 49151, {0x3c3c8000u, 0x3bbc8000u, 0x3dc84800u, 0xbdc84800u}},
      {"model.layers.0.self_attn.q_proj.weight", 1, {0xbe230000u, 0x3ecbc000u, 0xbca30000u, 0xbfa30000u, 0x3f50d800u, 0xbe98d000u, 0x3df48000u, 0x3e847000u}},
      {"model.layers.0.self_attn.q_proj.weight", 40, {0x3dd9e000u, 0x3dd9e000u, 0x3e2e6000u, 0xbdaec000u}},
      {"model.layers.29.self_attn.k_proj.weight", 161, {0xbd224000u, 0x3d2e8000u, 0xbd224000u, 0x3c790000u}},
      {"model.layers.0.mlp.down_proj.weight", 575, {0xbd24c000u, 0xbe131000u, 0xbdf13000u, 0x3e450800u}},
      {"model.norm.weight", 0, {0x3fe10000u, 0x3fe90000u, 0x3fe40000u, 0x3fcd0000u}},
  };
  for (const Spot& spot : spots) {
    INFO(spot.name << " row " << spot.row);
    const kiln::HfTensorSource* s = nullptr;
    for (const auto& candidate : sources) {
      if (candidate.hf_name == spot.name) s = &candidate;
    }
    REQUIRE(s != nullptr);
    std::vector<float> row(static_cast<size_t>(s->row_length()));
    if (s->shape.size() == 1) {
      row.resize(static_cast<size_t>(s->numel()));
      s->read_f32(row);
    } else {
      s->read_rows_f32(spot.row, row);
    }
    for (size_t i = 0; i < spot.bits.size(); ++i) CHECK(std::bit_cast<uint32_t>(row[i]) == spot.bits[i]);
  }
  // Whole-tensor sums (float64) from the same loader: every element of these tensors agrees.
  struct Sum {
    const char* name;
    double sum, abs_sum;
  };
  for (const Sum& expected : {Sum{"model.embed_tokens.weight", -15353.04449415207, 2802153.619805813},
                              Sum{"model.layers.0.self_attn.q_proj.weight", 59.22322082519531, 63395.39872741699},
                              Sum{"model.layers.29.self_attn.k_proj.weight", 87.89241790771484, 11157.1625289917}}) {
    INFO(expected.name);
    for (const auto& s : sources) {
      if (s.hf_name != expected.name) continue;
      const std::vector<float> all = read_all(s);
      double sum = 0, abs_sum = 0;
      for (float x : all) {
        sum += x;
        abs_sum += std::abs(static_cast<double>(x));
      }
      CHECK(sum == Approx(expected.sum).epsilon(1e-12));
      CHECK(abs_sum == Approx(expected.abs_sum).epsilon(1e-12));
    }
  }
}

TEST_CASE("gguf-to-hf: converts the real SmolLM2 file", "[gguf_llama][real]") {
  const auto path = kiln::test::cached_smollm2();
  if (!path) {
    WARN("SKIPPED: SmolLM2 GGUF not in the kiln cache (run tools/fetch-smollm2)");
    return;
  }
  TempDir dir;
  kiln::convert_gguf_to_hf(*path, dir.file("hf"), kiln::DType::BF16);
  const kiln::SafetensorsDir model(dir.file("hf"));
  CHECK(model.names().size() == 272);
  CHECK(model.find("lm_head.weight") == nullptr);  // tied
  // 134,515,008 parameters (transformers' count, lm_head tied) as bf16, plus the header.
  const auto size = std::filesystem::file_size(dir.file("hf/model.safetensors"));
  CHECK(size > 2 * 134515008u);
  CHECK(size < 2 * 134515008u + 65536);
  const kiln::TensorView* q = model.find("model.layers.0.self_attn.q_proj.weight");
  REQUIRE(q != nullptr);
  CHECK(q->shape == std::vector<int64_t>{576, 576});
  std::vector<float> values(static_cast<size_t>(q->numel()));
  kiln::convert_to_f32(*q, values);
  // Row 1, element 0 is -0.15917969 = 0xbe230000: already exact in bf16 (low 16 bits zero).
  CHECK(std::bit_cast<uint32_t>(values[576]) == 0xbe230000u);
  std::ifstream config_file(dir.file("hf/config.json"));
  const nlohmann::json config = nlohmann::json::parse(config_file);
  CHECK(config["rms_norm_eps"] == 1e-5);
  CHECK(config["num_key_value_heads"] == 3);
}
