// The weight loader's tensor-parallel slices: a hand-made model (a vocab-parallel embedding, a fused
// qkv from a q tensor and a fused kv tensor, gate/up rows per group, row-parallel projections taking
// a column slice, replicated norms, KV heads replicated over rank groups, a tied lm_head) defined
// whole and for 2 and 4 ranks. Each rank's loaded values must be exactly the slices of the whole
// model's, from random weights and from safetensors directories (fp32 and bf16 files, fp32 and bf16
// loads). Then the errors: a bad rank, a mis-shaped HF tensor, inconsistent manifests; a Q6_K
// projection on the GPU, kept as stored, with a NaN d refused; FP8 checkpoints and --quantize fp8.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/core/dtype.hpp"
#include "runtime/model/random_source.hpp"
#include "runtime/model/weight_loader.hpp"
#include "runtime/weights/dequant.hpp"
#include "runtime/weights/quant_repack.hpp"
#include "runtime/weights/safetensors.hpp"
#include "tests/weights/test_support.hpp"

using kiln::LoadedWeights;
using kiln::ModelDef;
using kiln::WeightFormat;
using kiln::WeightSource;
using kiln::WeightSpec;
using kiln::test::TempDir;

namespace {

// The whole model's numbers.
constexpr int64_t kVocab = 12, kHidden = 6, kHeads = 4, kKvHeads = 2, kHeadDim = 2, kInter = 12, kLayers = 2;
constexpr int64_t kQRows = kHeads * kHeadDim;     // 8
constexpr int64_t kKvRows = kKvHeads * kHeadDim;  // 4 (k), then 4 (v) in kv_proj

// A ModelDef and the manifest it points at.
struct TinyModel {
  std::vector<WeightSpec> specs;
  ModelDef def;
};

// The model for `tp` ranks (1: whole).
std::unique_ptr<TinyModel> tiny_model(int32_t tp) {
  auto m = std::make_unique<TinyModel>();
  const char* q_name = "model.layers.{L}.self_attn.q_proj.weight";
  const char* kv_name = "model.layers.{L}.self_attn.kv_proj.weight";  // k rows, then v rows
  const char* o_name = "model.layers.{L}.self_attn.o_proj.weight";
  const char* gate_up_name = "model.layers.{L}.mlp.gate_up_proj.weight";  // gate rows, then up rows
  const char* down_name = "model.layers.{L}.mlp.down_proj.weight";
  const char* embed_name = "model.embed_tokens.weight";
  std::vector<WeightSource> embed, qkv, o, gate_up, down;
  std::vector<std::vector<WeightSource>> lm_head;
  int64_t vocab = kVocab, qkv_rows = 0, o_cols = kQRows, inter = kInter;
  if (tp == 1) {
    embed = {{.hf_name = embed_name, .rows = kVocab}};
    lm_head = {{{.hf_name = "lm_head.weight", .rows = kVocab}}};  // used when the checkpoint has it
    qkv = {{.hf_name = q_name, .rows = kQRows}, {.hf_name = kv_name, .rows = 2 * kKvRows}};
    qkv_rows = kQRows + 2 * kKvRows;
    o = {{.hf_name = o_name, .rows = kHidden}};
    gate_up = {{.hf_name = gate_up_name, .rows = kInter, .groups = 2, .group_stride = kInter}};
    down = {{.hf_name = down_name, .rows = kHidden}};
  } else {
    vocab = kVocab / tp;  // vocab-parallel embedding; the tied LM head has no layout of its own
    embed = {{.hf_name = embed_name, .rows = vocab, .rank_rows = vocab, .hf_rows = kVocab, .hf_cols = kHidden}};
    const int64_t q_rows = kQRows / tp;
    const int64_t kv_heads = std::max<int64_t>(1, kKvHeads / tp);
    const int64_t kv_rows = kv_heads * kHeadDim;
    const int64_t group = tp > kKvHeads ? tp / kKvHeads : 1;  // ranks sharing one KV head
    qkv = {{.hf_name = q_name, .rows = q_rows, .rank_rows = q_rows, .hf_rows = kQRows, .hf_cols = kHidden},
           {.hf_name = kv_name, .rows = kv_rows, .rank_rows = kv_rows, .rank_group = group, .hf_rows = 2 * kKvRows,
            .hf_cols = kHidden},
           {.hf_name = kv_name, .rows = kv_rows, .row_begin = kKvRows, .rank_rows = kv_rows, .rank_group = group,
            .hf_rows = 2 * kKvRows, .hf_cols = kHidden}};
    qkv_rows = q_rows + 2 * kv_rows;
    o_cols = kQRows / tp;
    o = {{.hf_name = o_name, .rows = kHidden, .rank_cols = o_cols, .cols = o_cols, .hf_rows = kHidden,
          .hf_cols = kQRows}};
    inter = kInter / tp;
    gate_up = {{.hf_name = gate_up_name, .rows = inter, .groups = 2, .group_stride = kInter, .rank_rows = inter,
                .hf_rows = 2 * kInter, .hf_cols = kHidden}};
    down = {{.hf_name = down_name, .rows = kHidden, .rank_cols = inter, .cols = inter, .hf_rows = kHidden,
             .hf_cols = kInter}};
  }
  m->specs = {
      {"embed_tokens", false, 0, 0, {vocab, kHidden}, 0, {embed}, ""},
      {"layers.{L}.input_layernorm", true, 0, kLayers, {kHidden}, 0,
       {{{.hf_name = "model.layers.{L}.input_layernorm.weight", .rows = 1}}}, ""},
      {"layers.{L}.qkv_proj", true, 0, kLayers, {qkv_rows, kHidden}, 0, {qkv}, ""},
      {"layers.{L}.o_proj", true, 0, kLayers, {kHidden, o_cols}, 0, {o}, ""},
      {"layers.{L}.gate_up_proj", true, 0, kLayers, {2 * inter, kHidden}, 0, {gate_up}, ""},
      {"layers.{L}.down_proj", true, 0, kLayers, {kHidden, inter}, 0, {down}, ""},
      {"norm", false, 0, 0, {kHidden}, 0, {{{.hf_name = "model.norm.weight", .rows = 1}}}, ""},
      {"lm_head", false, 0, 0, {vocab, kHidden}, 0, lm_head, "embed_tokens"},
  };
  m->def.info.name = tp == 1 ? "tiny-tp1" : tp == 2 ? "tiny-tp2" : "tiny-tp4";
  m->def.info.tensor_parallel = tp;
  m->def.weights = &m->specs;
  return m;
}

// A sink that counts its writes (the GPU sink does one cudaMemcpy per write).
class CountingSink final : public kiln::WeightSink {
 public:
  std::byte* allocate(int64_t bytes) override {
    storage_.assign(static_cast<size_t>(bytes), std::byte{0});
    return storage_.data();
  }
  void write(std::byte* dst, const void* src, int64_t bytes) override {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    ++writes;
  }
  int64_t writes = 0;

 private:
  std::vector<std::byte> storage_;
};

// One loaded model: its sink (owning the bytes) and table.
struct Loaded {
  std::unique_ptr<CountingSink> sink = std::make_unique<CountingSink>();
  LoadedWeights weights;
  int64_t elem = 4;

  // A kiln tensor's values as raw element bits (fp32 or bf16 widened), row-major.
  std::vector<uint32_t> values(const std::string& name, int64_t layer, int64_t numel) const {
    std::vector<uint32_t> out(static_cast<size_t>(numel));
    const void* p = weights.table.get(name, layer);
    for (int64_t i = 0; i < numel; ++i) {
      if (elem == 4) {
        out[i] = static_cast<const uint32_t*>(p)[i];
      } else {
        out[i] = static_cast<const uint16_t*>(p)[i];
      }
    }
    return out;
  }
};

Loaded load_random(const ModelDef& model, uint64_t seed, WeightFormat format, int32_t rank = 0) {
  Loaded l;
  l.elem = format == WeightFormat::f32 ? 4 : 2;
  l.weights = kiln::random_weights(model, seed, format, *l.sink, rank);
  return l;
}

Loaded load_dir(const ModelDef& model, const std::string& dir, WeightFormat format, int32_t rank = 0) {
  Loaded l;
  l.elem = format == WeightFormat::f32 ? 4 : 2;
  const auto source = kiln::open_safetensors_source(dir);
  l.weights = kiln::load_weights(model, *source, format, *l.sink, rank);
  return l;
}

// Rows [row, row + count) of a row-major [*, cols] tensor, columns [col, col + width) of each.
std::vector<uint32_t> slice(const std::vector<uint32_t>& whole, int64_t cols, int64_t row, int64_t count, int64_t col,
                            int64_t width) {
  std::vector<uint32_t> out;
  for (int64_t r = row; r < row + count; ++r) {
    for (int64_t c = col; c < col + width; ++c) out.push_back(whole.at(static_cast<size_t>(r * cols + c)));
  }
  return out;
}

std::vector<uint32_t> concat(std::vector<std::vector<uint32_t>> parts) {
  std::vector<uint32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Every kiln tensor of `rank` of `tp` ranks equals its slice of the whole model's.
void check_rank_slices(const Loaded& whole, const Loaded& part, int32_t tp, int32_t rank) {
  INFO("rank " << rank << " of " << tp);
  const int64_t q_rows = kQRows / tp, kv_rows = std::max<int64_t>(1, kKvHeads / tp) * kHeadDim;
  const int64_t kv_slot = rank / (tp > kKvHeads ? tp / kKvHeads : 1);  // which KV rows this rank holds
  const int64_t vocab = kVocab / tp, o_cols = kQRows / tp, inter = kInter / tp;
  CHECK(part.values("embed_tokens", -1, vocab * kHidden) ==
        slice(whole.values("embed_tokens", -1, kVocab * kHidden), kHidden, rank * vocab, vocab, 0, kHidden));
  CHECK(part.values("norm", -1, kHidden) == whole.values("norm", -1, kHidden));
  CHECK(part.weights.table.get("lm_head") == part.weights.table.get("embed_tokens"));  // still tied
  for (int64_t l = 0; l < kLayers; ++l) {
    INFO("layer " << l);
    CHECK(part.values("layers.{L}.input_layernorm", l, kHidden) ==
          whole.values("layers.{L}.input_layernorm", l, kHidden));
    // Whole qkv rows: q [0, 8), k [8, 12), v [12, 16).
    const auto qkv = whole.values("layers.{L}.qkv_proj", l, (kQRows + 2 * kKvRows) * kHidden);
    CHECK(part.values("layers.{L}.qkv_proj", l, (q_rows + 2 * kv_rows) * kHidden) ==
          concat({slice(qkv, kHidden, rank * q_rows, q_rows, 0, kHidden),
                  slice(qkv, kHidden, kQRows + kv_slot * kv_rows, kv_rows, 0, kHidden),
                  slice(qkv, kHidden, kQRows + kKvRows + kv_slot * kv_rows, kv_rows, 0, kHidden)}));
    const auto o = whole.values("layers.{L}.o_proj", l, kHidden * kQRows);
    CHECK(part.values("layers.{L}.o_proj", l, kHidden * o_cols) == slice(o, kQRows, 0, kHidden, rank * o_cols, o_cols));
    // Whole gate_up rows: gate [0, 12), up [12, 24).
    const auto gate_up = whole.values("layers.{L}.gate_up_proj", l, 2 * kInter * kHidden);
    CHECK(part.values("layers.{L}.gate_up_proj", l, 2 * inter * kHidden) ==
          concat({slice(gate_up, kHidden, rank * inter, inter, 0, kHidden),
                  slice(gate_up, kHidden, kInter + rank * inter, inter, 0, kHidden)}));
    const auto down = whole.values("layers.{L}.down_proj", l, kHidden * kInter);
    CHECK(part.values("layers.{L}.down_proj", l, kHidden * inter) ==
          slice(down, kInter, 0, kHidden, rank * inter, inter));
  }
}

// The HF tensors of the tiny model, whole, with values exact in bf16 and distinct per position.
struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

std::vector<HfTensor> hf_tensors() {
  std::vector<HfTensor> out;
  const auto add = [&](std::string name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (const int64_t d : shape) n *= d;
    const int64_t salt = static_cast<int64_t>(out.size()) * 13;
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7 + salt) % 201 - 100) / 32.0f;
    out.push_back({std::move(name), std::move(shape), std::move(v)});
  };
  add("model.embed_tokens.weight", {kVocab, kHidden});
  add("model.norm.weight", {kHidden});
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {kHidden});
    add(p + "self_attn.q_proj.weight", {kQRows, kHidden});
    add(p + "self_attn.kv_proj.weight", {2 * kKvRows, kHidden});
    add(p + "self_attn.o_proj.weight", {kHidden, kQRows});
    add(p + "mlp.gate_up_proj.weight", {2 * kInter, kHidden});
    add(p + "mlp.down_proj.weight", {kHidden, kInter});
  }
  return out;
}

uint16_t bf16_bits(float v) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16); }  // exact values only

// Writes the tensors to dir/model.safetensors as fp32 or bf16.
void write_dir(const TempDir& dir, const std::vector<HfTensor>& tensors, bool bf16) {
  std::vector<std::vector<uint16_t>> bits(tensors.size());
  std::vector<kiln::TensorToWrite> out;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const HfTensor& h = tensors[t];
    if (bf16) {
      for (const float v : h.values) bits[t].push_back(bf16_bits(v));
      out.push_back({h.name, kiln::DType::BF16, h.shape, std::as_bytes(std::span(bits[t]))});
    } else {
      out.push_back({h.name, kiln::DType::F32, h.shape, std::as_bytes(std::span(h.values))});
    }
  }
  kiln::write_safetensors(dir.file("model.safetensors"), out);
}

// Sink writes of a load of the tiny model: one per source piece and group (all chunks are one here).
int64_t expected_writes(int32_t tp) {
  const int64_t per_layer = 1 /* norm */ + (tp == 1 ? 2 : 3) /* qkv pieces */ + 1 /* o */ + 2 /* gate_up groups */ +
                            1 /* down */;
  return 2 /* embed, norm */ + kLayers * per_layer;
}

}  // namespace

TEST_CASE("weight loader: each rank's random weights are its slices of the whole model's", "[weights][tp]") {
  const auto whole_def = tiny_model(1);
  for (const WeightFormat format : {WeightFormat::f32, WeightFormat::bf16}) {
    INFO((format == WeightFormat::f32 ? "fp32" : "bf16"));
    const Loaded whole = load_random(whole_def->def, 42, format);
    CHECK(whole.weights.table.get("lm_head") == whole.weights.table.get("embed_tokens"));
    CHECK(whole.sink->writes == expected_writes(1));
    for (const int32_t tp : {2, 4}) {
      const auto def = tiny_model(tp);
      for (int32_t rank = 0; rank < tp; ++rank) {
        const Loaded part = load_random(def->def, 42, format, rank);
        check_rank_slices(whole, part, tp, rank);
        CHECK(part.sink->writes == expected_writes(tp));
      }
    }
  }
  // Another seed, other values.
  const Loaded a = load_random(whole_def->def, 42, WeightFormat::f32);
  const Loaded b = load_random(whole_def->def, 43, WeightFormat::f32);
  CHECK(a.values("norm", -1, kHidden) != b.values("norm", -1, kHidden));
  // The values are those of the HF tensor, by name and flat index.
  const auto source = kiln::open_random_source(whole_def->def, 42);
  CHECK(*source->shape("model.layers.1.mlp.gate_up_proj.weight") == std::vector<int64_t>{2 * kInter, kHidden});
  CHECK(*source->shape("model.norm.weight") == std::vector<int64_t>{kHidden});
  CHECK_FALSE(source->shape("lm_head.weight").has_value());  // tied: not listed
  std::vector<float> rows(3 * kQRows);
  source->read_rows("model.layers.1.self_attn.o_proj.weight", 2, 3, rows.data());
  std::vector<uint32_t> bits;
  for (const float v : rows) bits.push_back(std::bit_cast<uint32_t>(v));
  CHECK(bits == slice(a.values("layers.{L}.o_proj", 1, kHidden * kQRows), kQRows, 2, 3, 0, kQRows));
}

TEST_CASE("random weights keep their distribution: norms near 1, matrices with standard deviation 0.02",
          "[weights][tp]") {
  TinyModel m{};
  m.specs = {{"big", false, 0, 0, {256, 512}, 0, {{{.hf_name = "big.weight", .rows = 256}}}, ""},
             {"norm", false, 0, 0, {512}, 0, {{{.hf_name = "norm.weight", .rows = 1}}}, ""}};
  m.def.info.name = "random-stats";
  m.def.weights = &m.specs;
  const Loaded l = load_random(m.def, 5, WeightFormat::f32);
  const float* big = l.weights.table.get_as<float>("big");
  double sum = 0, sum2 = 0;
  const double bound = 0.02 * std::sqrt(3.0);
  for (int64_t i = 0; i < 256 * 512; ++i) {
    REQUIRE(std::abs(big[i]) <= bound);
    sum += big[i];
    sum2 += static_cast<double>(big[i]) * big[i];
  }
  const double mean = sum / (256 * 512);
  CHECK(std::abs(mean) < 1e-3);
  CHECK(std::sqrt(sum2 / (256 * 512) - mean * mean) == Approx(0.02).epsilon(0.02));
  const float* norm = l.weights.table.get_as<float>("norm");
  for (int64_t i = 0; i < 512; ++i) {
    REQUIRE(norm[i] >= 0.9f);
    REQUIRE(norm[i] < 1.1f);
  }
}

TEST_CASE("weight loader: each rank's weights from a safetensors directory are its slices", "[weights][tp]") {
  const std::vector<HfTensor> tensors = hf_tensors();
  TempDir f32_dir, bf16_dir;
  write_dir(f32_dir, tensors, false);
  write_dir(bf16_dir, tensors, true);
  const auto whole_def = tiny_model(1);

  // The whole model's load is the HF tensors themselves (checked once, on one fused tensor).
  const Loaded whole_f32 = load_dir(whole_def->def, f32_dir.path().string(), WeightFormat::f32);
  std::vector<uint32_t> gate_up_bits;
  for (const float v : tensors[6].values) gate_up_bits.push_back(std::bit_cast<uint32_t>(v));
  REQUIRE(tensors[6].name == "model.layers.0.mlp.gate_up_proj.weight");
  CHECK(whole_f32.values("layers.{L}.gate_up_proj", 0, 2 * kInter * kHidden) == gate_up_bits);

  // bf16 file into bf16 weights: the mapped bits, sliced (compared as raw bf16 bits).
  const Loaded whole_bf16 = load_dir(whole_def->def, bf16_dir.path().string(), WeightFormat::bf16);
  CHECK(whole_bf16.sink->writes == expected_writes(1));
  for (const int32_t tp : {2, 4}) {
    const auto def = tiny_model(tp);
    for (int32_t rank = 0; rank < tp; ++rank) {
      SECTION("tp " + std::to_string(tp) + " rank " + std::to_string(rank)) {
        // fp32 file, fp32 and bf16 loads (read_rows, then the columns kept).
        check_rank_slices(whole_f32, load_dir(def->def, f32_dir.path().string(), WeightFormat::f32, rank), tp, rank);
        const Loaded whole_f32_bf16 = load_dir(whole_def->def, f32_dir.path().string(), WeightFormat::bf16);
        check_rank_slices(whole_f32_bf16, load_dir(def->def, f32_dir.path().string(), WeightFormat::bf16, rank), tp,
                          rank);
        // bf16 file: straight from the mapping (bf16 load), or its column slice converted (fp32 load).
        const Loaded part = load_dir(def->def, bf16_dir.path().string(), WeightFormat::bf16, rank);
        check_rank_slices(whole_bf16, part, tp, rank);
        CHECK(part.sink->writes == expected_writes(tp));  // one write per piece, never one per row
        check_rank_slices(whole_f32, load_dir(def->def, bf16_dir.path().string(), WeightFormat::f32, rank), tp, rank);
      }
    }
  }
}

TEST_CASE("weight loader: a rank reads only its own columns of a bf16 checkpoint", "[weights][tp]") {
  // A NaN in the last rank's columns of o_proj: only the ranks (and the whole model) holding it fail.
  std::vector<HfTensor> tensors = hf_tensors();
  REQUIRE(tensors[5].name == "model.layers.0.self_attn.o_proj.weight");
  tensors[5].values[1 * kQRows + 7] = std::nanf("");  // row 1, column 7
  TempDir dir;
  write_dir(dir, tensors, true);
  const auto tp4 = tiny_model(4);
  for (const WeightFormat format : {WeightFormat::bf16, WeightFormat::f32}) {
    for (int32_t rank = 0; rank < 3; ++rank) CHECK_NOTHROW(load_dir(tp4->def, dir.path().string(), format, rank));
    CHECK_KILN_ERROR(load_dir(tp4->def, dir.path().string(), format, 3), "o_proj.weight", "NaN", "row 1",
                     "column 7");
    CHECK_KILN_ERROR(load_dir(tiny_model(1)->def, dir.path().string(), format, 0), "o_proj.weight", "NaN", "row 1",
                     "column 7");
  }
}

TEST_CASE("weight loader: a rank outside the model's tensor_parallel is an error naming both", "[weights][tp]") {
  const auto tp2 = tiny_model(2);
  const auto tp1 = tiny_model(1);
  CHECK_KILN_ERROR(load_random(tp2->def, 1, WeightFormat::f32, 2), "rank 2", "tiny-tp2", "tensor_parallel is 2");
  CHECK_KILN_ERROR(load_random(tp2->def, 1, WeightFormat::f32, -1), "rank -1", "tensor_parallel is 2");
  CHECK_KILN_ERROR(load_random(tp1->def, 1, WeightFormat::f32, 1), "rank 1", "tensor_parallel is 1");
  TempDir dir;
  write_dir(dir, hf_tensors(), false);
  CHECK_KILN_ERROR(load_dir(tp2->def, dir.path().string(), WeightFormat::f32, 5), "rank 5", "tensor_parallel is 2");
}

TEST_CASE("weight loader: a checkpoint tensor of another shape than the whole HF tensor is an error", "[weights][tp]") {
  std::vector<HfTensor> tensors = hf_tensors();
  REQUIRE(tensors[11].name == "model.layers.1.self_attn.o_proj.weight");
  tensors[11].shape = {kHidden, kQRows - 2};  // [6, 6], not [6, 8]
  tensors[11].values.resize(kHidden * (kQRows - 2));
  TempDir dir;
  write_dir(dir, tensors, false);
  CHECK_KILN_ERROR(load_dir(tiny_model(2)->def, dir.path().string(), WeightFormat::f32, 1),
                   "model.layers.1.self_attn.o_proj.weight", "has shape [6, 6]", "expected 6 rows of 8 values",
                   "rank 1 of 2", "layers.{L}.o_proj of layer 1");
  CHECK_KILN_ERROR(load_dir(tiny_model(1)->def, dir.path().string(), WeightFormat::f32, 0),
                   "model.layers.1.self_attn.o_proj.weight", "has shape [6, 6]", "expected 6 rows of 8 values");
  // A bf16 file goes through the same check before any row is read.
  TempDir bf16_dir;
  write_dir(bf16_dir, tensors, true);
  CHECK_KILN_ERROR(load_dir(tiny_model(4)->def, bf16_dir.path().string(), WeightFormat::bf16, 3),
                   "model.layers.1.self_attn.o_proj.weight", "has shape [6, 6]", "expected 6 rows of 8 values");
}

TEST_CASE("weight loader: inconsistent rank fields in a manifest are internal errors", "[weights][tp]") {
  SECTION("rank fields on a whole model") {
    auto m = tiny_model(1);
    m->specs[3].layouts[0][0] = tiny_model(2)->specs[3].layouts[0][0];  // o_proj's rank slice
    CHECK_KILN_ERROR(load_random(m->def, 1, WeightFormat::f32), "internal", "o_proj.weight", "tensor_parallel is 1");
  }
  SECTION("a slice past the end of the HF tensor") {
    auto m = tiny_model(4);
    m->specs[2].layouts[0][0].rank_rows = 3;  // q rows 2 at 3 × rank: rank 3 reaches row 11 of 8
    CHECK_KILN_ERROR(load_random(m->def, 1, WeightFormat::f32, 0), "internal", "q_proj.weight", "reaches row 11");
  }
  SECTION("columns past the end of the HF tensor") {
    auto m = tiny_model(2);
    m->specs[5].layouts[0][0].rank_cols = 7;  // down: 6 columns at 7 × rank
    CHECK_KILN_ERROR(load_random(m->def, 1, WeightFormat::f32, 0), "internal", "down_proj.weight", "reaches column 13");
  }
  SECTION("a slice without the whole HF shape") {
    auto m = tiny_model(2);
    m->specs[5].layouts[0][0].hf_rows = 0;
    CHECK_KILN_ERROR(load_random(m->def, 1, WeightFormat::f32, 0), "internal", "down_proj.weight", "hf_rows 0");
  }
  SECTION("two entries naming one HF tensor with different shapes") {
    auto m = tiny_model(1);
    m->specs.push_back({"extra", false, 0, 0, {4, kHidden}, 0, {{{.hf_name = "model.norm.weight", .rows = 4}}}, ""});
    CHECK_KILN_ERROR(load_random(m->def, 1, WeightFormat::f32), "internal", "model.norm.weight", "[6]", "[4, 6]");
  }
}

namespace {

// One GGUF-style tensor "w" of K-quant rows (one super-block each) of `type`, in memory.
class KQuantSource final : public kiln::TensorSource {
 public:
  KQuantSource(kiln::GgmlType type, int64_t rows, std::vector<std::byte> blocks)
      : type_(type), rows_(rows), blocks_(std::move(blocks)) {}
  std::string describe() const override { return "kquant.gguf"; }
  std::vector<std::string> names() const override { return {"w"}; }
  std::optional<std::vector<int64_t>> shape(const std::string& name) const override {
    if (name != "w") return std::nullopt;
    return std::vector<int64_t>{rows_, 256};
  }
  void read_rows(const std::string&, int64_t first, int64_t count, float* out) const override {
    kiln::dequantize(type_, std::span<const std::byte>(blocks_).subspan(first * row_bytes(), count * row_bytes()),
                     std::span<float>(out, static_cast<size_t>(count * 256)));
  }
  std::optional<kiln::GgmlType> block_type(const std::string&) const override { return type_; }
  std::span<const std::byte> stored_row(const std::string&, int64_t row) const override {
    return std::span<const std::byte>(blocks_).subspan(static_cast<size_t>(row) * row_bytes(), row_bytes());
  }

 private:
  size_t row_bytes() const { return kiln::ggml_block_bytes(type_); }  // one super-block a row
  kiln::GgmlType type_;
  int64_t rows_;
  std::vector<std::byte> blocks_;
};

}  // namespace

// A Q6_K, Q2_K or Q3_K projection keeps its blocks on the GPU and on the fast CPU backend with
// ggml's values; a NaN d (Q6_K's and Q3_K's are the last two bytes of a block, Q2_K's d and dmin
// the last four, not the first as in the other types) is refused, naming the tensor and the row.
TEST_CASE("weight loader: the GPU and the CPU keep a Q6_K, Q2_K or Q3_K projection's blocks and refuse a NaN d or dmin in them",
          "[weights]") {
  constexpr int64_t kRows = 4;
  std::vector<WeightSpec> specs = {{"proj", false, 0, 0, {kRows, 256}, 0, {{{.hf_name = "w", .rows = kRows}}}, "", true}};
  ModelDef def;
  def.info.name = "kquant";
  def.info.tensor_parallel = 1;
  def.weights = &specs;
  for (const kiln::GgmlType type : {kiln::GgmlType::Q6_K, kiln::GgmlType::Q2_K, kiln::GgmlType::Q3_K}) {
    INFO(kiln::ggml_type_name(type));
    const int64_t bytes = static_cast<int64_t>(kiln::ggml_block_bytes(type));
    const kiln::MatrixFormat f = *kiln::matrix_format_of(type);
    std::vector<std::byte> blocks = kiln::test::random_gguf_blocks(type, kRows, 256, 7);
    std::vector<float> values(static_cast<size_t>(kRows * 256));
    kiln::dequantize(type, blocks, values);
    {
      KQuantSource source(type, kRows, blocks);
      CountingSink sink;
      const LoadedWeights w = kiln::load_weights(def, source, WeightFormat::gpu, sink);
      REQUIRE(w.table.format("proj") == f);
      CHECK(w.quantized_bytes == kRows * bytes);  // the file's bytes
      const auto* matrix = static_cast<const std::byte*>(w.table.get("proj"));
      int64_t wrong = 0;
      for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t c = 0; c < 256; ++c) wrong += kiln::matrix_value(f, matrix, kRows, 256, r, c) != values[r * 256 + c];
      }
      CHECK(wrong == 0);
    }
    {
      KQuantSource source(type, kRows, blocks);
      CountingSink sink;
      const LoadedWeights w = kiln::load_weights(def, source, WeightFormat::cpu, sink);
      REQUIRE(w.table.format("proj") == f);
      CHECK(w.requantized == 0);
      const auto* matrix = static_cast<const std::byte*>(w.table.get("proj"));
      int64_t wrong = 0;
      for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t c = 0; c < 256; ++c) wrong += kiln::cpu_matrix_value(f, matrix, 256, r, c) != values[r * 256 + c];
      }
      CHECK(wrong == 0);
    }
    // Row 2's d (Q2_K: then its dmin): fp16 NaN.
    const int64_t scales = type == kiln::GgmlType::Q2_K ? 2 : 1;
    for (int64_t h = 0; h < scales; ++h) {
      std::vector<std::byte> bad = blocks;
      const int64_t at = 2 * bytes + bytes - 2 * scales + 2 * h;
      bad[static_cast<size_t>(at)] = std::byte{0x00};
      bad[static_cast<size_t>(at + 1)] = std::byte{0x7E};
      for (const WeightFormat device : {WeightFormat::gpu, WeightFormat::cpu}) {
        KQuantSource source(type, kRows, bad);
        CountingSink sink;
        CHECK_KILN_ERROR(kiln::load_weights(def, source, device, sink), "kquant.gguf", "tensor w",
                         h == 0 ? "NaN or infinite scale in block 0" : "NaN or infinite min in block 0", "at row 2",
                         "corrupt");
      }
    }
  }
}

namespace {

// FP8-checkpoint-style tensors in memory: each E4M3 codes [rows, cols] with a scale per block of
// block_rows × block_cols (the safetensors source's interface).
class Fp8Source final : public kiln::TensorSource {
 public:
  struct Tensor {
    int64_t rows, cols;
    std::vector<uint8_t> codes;
    std::vector<float> scales;  // [ceil(rows / block_rows), ceil(cols / block_cols)]
  };
  Fp8Source(int64_t block_rows, int64_t block_cols, std::map<std::string, Tensor> tensors)
      : block_{block_rows, block_cols}, tensors_(std::move(tensors)) {}
  std::string describe() const override { return "fp8 checkpoint"; }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [name, t] : tensors_) out.push_back(name);
    return out;
  }
  std::optional<std::vector<int64_t>> shape(const std::string& name) const override {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) return std::nullopt;
    return std::vector<int64_t>{it->second.rows, it->second.cols};
  }
  void read_rows(const std::string& name, int64_t first, int64_t count, float* out) const override {
    const Tensor& t = tensors_.at(name);
    for (int64_t r = first; r < first + count; ++r) {
      for (int64_t c = 0; c < t.cols; ++c) *out++ = value(t, r, c);
    }
  }
  std::optional<Fp8Blocks> fp8_blocks(const std::string&) const override { return block_; }
  std::span<const uint8_t> fp8_codes(const std::string& name, int64_t row) const override {
    const Tensor& t = tensors_.at(name);
    return std::span<const uint8_t>(t.codes).subspan(static_cast<size_t>(row * t.cols), static_cast<size_t>(t.cols));
  }
  void fp8_scales(const std::string& name, int64_t block_row, std::span<float> out) const override {
    const Tensor& t = tensors_.at(name);
    REQUIRE(static_cast<int64_t>(out.size()) == block_columns(t));
    std::copy_n(t.scales.begin() + block_row * block_columns(t), out.size(), out.begin());
  }
  float value(const Tensor& t, int64_t r, int64_t c) const {
    return kiln::f8e4m3_to_f32(t.codes[r * t.cols + c]) * fp8_scale_of(t, r, c);
  }
  float fp8_scale_of(const Tensor& t, int64_t r, int64_t c) const {
    return t.scales[static_cast<size_t>(r / block_.rows * block_columns(t) + c / block_.cols)];
  }

 private:
  int64_t block_columns(const Tensor& t) const { return (t.cols + block_.cols - 1) / block_.cols; }
  Fp8Blocks block_;
  std::map<std::string, Tensor> tensors_;
};

Fp8Source::Tensor random_fp8_tensor(int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols, uint32_t seed) {
  std::mt19937 rng(seed);
  Fp8Source::Tensor t{rows, cols, std::vector<uint8_t>(static_cast<size_t>(rows * cols)),
                      std::vector<float>(static_cast<size_t>((rows + block_rows - 1) / block_rows *
                                                             ((cols + block_cols - 1) / block_cols)))};
  for (uint8_t& v : t.codes) v = kiln::test::random_finite_e4m3(rng);
  for (float& s : t.scales) s = std::ldexp(1.0f + static_cast<float>(rng() % 100) / 100.0f, -static_cast<int>(rng() % 10) - 4);
  return t;
}

// A model of one projection "proj" of [kRows, 256] stacked from "a" (its first `split` rows) and "b"
// (the rest).
constexpr int64_t kFp8Rows = 256;
struct Fp8Model {
  std::vector<WeightSpec> specs;
  ModelDef def;
};
std::unique_ptr<Fp8Model> fp8_model(int64_t split) {
  auto m = std::make_unique<Fp8Model>();
  m->specs = {{"proj", false, 0, 0, {kFp8Rows, 256}, 0,
               {{{.hf_name = "a", .rows = split}, {.hf_name = "b", .rows = kFp8Rows - split}}}, "", true}};
  m->def.info.name = "fp8";
  m->def.info.tensor_parallel = 1;
  m->def.weights = &m->specs;
  return m;
}

}  // namespace

// An FP8 checkpoint's projection on the GPU keeps its codes and block scales where 128-column
// blocks and pieces of whole 128-row blocks allow (the published 128 × 128 blocks), else is
// quantized to FP8 at load from its values; the reference backend's --quantize fp8 computes with
// the GPU's values either way; NaN codes and scales are refused naming the tensor and row.
TEST_CASE("weight loader: FP8 checkpoints and --quantize fp8 on the GPU", "[weights]") {
  using kiln::MatrixFormat;
  const auto load = [](const ModelDef& def, const kiln::TensorSource& source, WeightFormat format,
                       kiln::Quantize quantize = kiln::Quantize::none) {
    auto sink = std::make_unique<CountingSink>();
    LoadedWeights w = kiln::load_weights(def, source, format, *sink, 0, quantize);
    return std::pair{std::move(sink), std::move(w)};
  };
  // The stacked matrix's value (r, c) as the source holds it.
  const auto source_value = [](const Fp8Source& s, const std::map<std::string, Fp8Source::Tensor>& t, int64_t split,
                               int64_t r, int64_t c) {
    return r < split ? s.value(t.at("a"), r, c) : s.value(t.at("b"), r - split, c);
  };
  for (const int64_t block_rows : {128, 256}) {
    const std::map<std::string, Fp8Source::Tensor> tensors = {{"a", random_fp8_tensor(128, 256, block_rows, 128, 1)},
                                                              {"b", random_fp8_tensor(128, 256, block_rows, 128, 2)}};
    const Fp8Source source(block_rows, 128, tensors);
    const auto m = fp8_model(128);
    INFO("blocks of " << block_rows << " × 128");
    const auto [sink, w] = load(m->def, source, WeightFormat::gpu);
    REQUIRE(w.table.format("proj") == MatrixFormat::fp8);
    CHECK(w.fp8_at_load == 0);
    // Block scales: the prefill's inputs then per 128 columns, beside the blocks.
    CHECK(w.table.get_matrix<uint16_t>("proj").fp8_scale == 0.0f);
    CHECK(w.quantized_bytes == kiln::matrix_bytes(MatrixFormat::fp8, kFp8Rows, 256));
    CHECK(w.quantized_bytes == kFp8Rows * 256 + 2 * 2 * 4);  // the codes, and 2 × 2 blocks' scales
    const auto* matrix = static_cast<const std::byte*>(w.table.get("proj"));
    const auto [ref_sink, ref] = load(m->def, source, WeightFormat::f32, kiln::Quantize::fp8);
    const auto* ref_values = static_cast<const float*>(ref.table.get("proj"));
    int64_t wrong = 0, ref_wrong = 0;
    for (int64_t r = 0; r < kFp8Rows; ++r) {
      for (int64_t c = 0; c < 256; ++c) {
        const float v = kiln::matrix_value(MatrixFormat::fp8, matrix, kFp8Rows, 256, r, c);
        wrong += v != source_value(source, tensors, 128, r, c);
        ref_wrong += ref_values[r * 256 + c] != v;
      }
    }
    CHECK(wrong == 0);
    CHECK(ref_wrong == 0);
    CHECK(kiln::weight_formats_text(w, "bf16") == "blocks: FP8 for 1 of 1 projections; the rest bf16");
  }
  SECTION("blocks the GPU cannot take as stored, or pieces that are not whole blocks: quantized at load") {
    for (const auto& [block_cols, split] : {std::pair<int64_t, int64_t>{64, 128}, {128, 64}}) {
      const std::map<std::string, Fp8Source::Tensor> tensors = {
          {"a", random_fp8_tensor(split, 256, 128, block_cols, 3)},
          {"b", random_fp8_tensor(kFp8Rows - split, 256, 128, block_cols, 4)}};
      const Fp8Source source(128, block_cols, tensors);
      const auto m = fp8_model(split);
      INFO("blocks of 128 × " << block_cols << ", pieces of " << split << " and " << kFp8Rows - split << " rows");
      const auto [sink, w] = load(m->def, source, WeightFormat::gpu);
      REQUIRE(w.table.format("proj") == MatrixFormat::fp8);
      CHECK(w.fp8_at_load == 1);
      CHECK(kiln::weight_formats_text(w, "bf16").find("(1 quantized to FP8 at load)") != std::string::npos);
      const auto* matrix = static_cast<const std::byte*>(w.table.get("proj"));
      float amax = 0.0f;
      for (int64_t r = 0; r < kFp8Rows; ++r) {
        for (int64_t c = 0; c < 256; ++c) amax = std::max(amax, std::fabs(source_value(source, tensors, split, r, c)));
      }
      CHECK(w.table.get_matrix<uint16_t>("proj").fp8_scale == amax / 448.0f);
      int64_t far = 0, other_scale = 0;
      for (int64_t r = 0; r < kFp8Rows; ++r) {
        for (int64_t c = 0; c < 256; ++c) {
          const float x = source_value(source, tensors, split, r, c), v = kiln::matrix_value(MatrixFormat::fp8, matrix, kFp8Rows, 256, r, c);
          // E4M3 keeps 4 significant bits: half a step is 1/16 of the value, or (below 2^-6 of the
          // scale) half the smallest step, scale · 2^-10; the scale being the matrix's max / 448.
          far += std::fabs(v - x) > 1.001f * std::max(std::fabs(x) / 16, amax / 448 * 0x1p-10f);
        }
      }
      // One scale for the whole matrix: every block's.
      for (int64_t b = 0; b < 4; ++b) {
        float scale;
        std::memcpy(&scale, matrix + kiln::quant_scales_offset(MatrixFormat::fp8, kFp8Rows, 256) + b * 4, 4);
        other_scale += scale != amax / 448.0f;
      }
      CHECK(other_scale == 0);
      CHECK(far == 0);
    }
  }
  SECTION("--quantize fp8 of plain values, and where it cannot run") {
    auto m = fp8_model(128);
    const auto random = kiln::open_random_source(m->def, 5);
    const auto [sink, w] = load(m->def, *random, WeightFormat::gpu, kiln::Quantize::fp8);
    CHECK(w.table.format("proj") == MatrixFormat::fp8);
    CHECK(w.fp8_at_load == 1);
    CHECK(w.table.get_matrix<uint16_t>("proj").fp8_scale > 0.0f);
    CHECK_KILN_ERROR(load(m->def, *random, WeightFormat::cpu, kiln::Quantize::fp8), "--quantize fp8", "fast CPU backend");
    CHECK_KILN_ERROR(load(m->def, *random, WeightFormat::bf16, kiln::Quantize::fp8), "--quantize fp8", "tensor-parallel");
  }
  SECTION("a NaN code or scale is refused, naming the tensor and row") {
    std::map<std::string, Fp8Source::Tensor> tensors = {{"a", random_fp8_tensor(128, 256, 128, 128, 1)},
                                                        {"b", random_fp8_tensor(128, 256, 128, 128, 2)}};
    const auto m = fp8_model(128);
    tensors["b"].codes[5 * 256 + 7] = 0xFF;
    CHECK_KILN_ERROR(load(m->def, Fp8Source(128, 128, tensors), WeightFormat::gpu), "fp8 checkpoint", "tensor b",
                     "E4M3 NaN in column 7", "at row 5", "corrupt");
    tensors["b"].codes[5 * 256 + 7] = 0x01;
    tensors["a"].scales[1] = NAN;
    CHECK_KILN_ERROR(load(m->def, Fp8Source(128, 128, tensors), WeightFormat::gpu), "fp8 checkpoint", "tensor a",
                     "NaN or infinite scale in block column 1", "at row 0");
    // Blocks 64 columns wide are quantized at load from their values (one scale for the matrix):
    // a NaN scale makes NaN values, refused before the matrix's scale is taken from them.
    std::map<std::string, Fp8Source::Tensor> narrow = {{"a", random_fp8_tensor(128, 256, 128, 64, 1)},
                                                       {"b", random_fp8_tensor(128, 256, 128, 64, 2)}};
    narrow["b"].scales[1] = NAN;
    CHECK_KILN_ERROR(load(m->def, Fp8Source(128, 64, narrow), WeightFormat::gpu), "fp8 checkpoint", "tensor b",
                     "holds NaN in column 64", "at row 0", "corrupt");
    CHECK_KILN_ERROR(load(m->def, Fp8Source(128, 64, narrow), WeightFormat::f32, kiln::Quantize::fp8), "tensor b",
                     "holds NaN in column 64");
  }
}

TEST_CASE("weight table: a second set of a tensor replaces the first, and an absent one is an error naming it", "[weights]") {
  kiln::WeightTable table;
  const float a = 1.0f, b = 2.0f;
  table.set("proj", 3, &a, kiln::MatrixFormat::bf16);
  table.set("proj", 4, &a, kiln::MatrixFormat::bf16);
  table.set("proj", 3, &b, kiln::MatrixFormat::bf16_packed);  // as the loader's packing does
  CHECK(table.get("proj", 3) == &b);
  CHECK(table.format("proj", 3) == kiln::MatrixFormat::bf16_packed);
  CHECK(table.get("proj", 4) == &a);
  CHECK(table.format("proj", 4) == kiln::MatrixFormat::bf16);
  CHECK_KILN_ERROR(table.get("proj", 5), "weight proj", "of layer 5", "was not loaded");
}
