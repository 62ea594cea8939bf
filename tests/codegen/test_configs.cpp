// Config front ends: every shipped config loads; each kind of bad config is rejected with one line
// naming the file and the field.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "codegen/config_load.hpp"
#include "codegen/decode_step.hpp"
#include "codegen/emit.hpp"
#include "runtime/core/error.hpp"
#include "tests/support/temp_dir.hpp"

using namespace kiln::codegen;
namespace fs = std::filesystem;

namespace {

const std::string kConfigs = std::string(KILN_SOURCE_DIR) + "/configs/";

std::string read(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Writes `text` to a temporary folder (named `folder`, or numbered) as config<ext>; returns the path.
// The folders live in one TempDir, removed when the test program exits.
std::string temp_config(const std::string& text, const std::string& ext, std::string folder = "") {
  static const kiln::test::TempDir dir("kiln-config-test");
  static int n = 0;
  if (folder.empty()) folder = std::to_string(++n);
  return dir.write(folder + "/config" + ext, text);
}

// tiny-llama.yaml with `from` replaced by `to`.
std::string tiny_llama_with(const std::string& from, const std::string& to) {
  std::string text = read(kConfigs + "tiny-llama.yaml");
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

std::string load_error(const std::string& path) {
  try {
    load_config(path);
  } catch (const kiln::Error& e) {
    return e.what();
  }
  FAIL("config " << path << " was accepted");
  return "";
}

// The message names the file and the field, on one line.
void check_yaml_rejection(const std::string& from, const std::string& to, const std::string& field,
                          const std::string& detail) {
  const std::string path = temp_config(tiny_llama_with(from, to), ".yaml");
  const std::string message = load_error(path);
  INFO(message);
  CHECK(message.find(path) != std::string::npos);
  CHECK(message.find(field) != std::string::npos);
  CHECK(message.find(detail) != std::string::npos);
  CHECK(message.find('\n') == std::string::npos);
}

const char* kHfLlama = R"({
  "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
  "hidden_size": 288, "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2,
  "head_dim": 48, "intermediate_size": 200, "vocab_size": 300, "max_position_embeddings": 1024,
  "rms_norm_eps": 1e-05, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
  "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
  "transformers_version": "5.17.0"
})";

std::string hf_with(const std::string& from, const std::string& to) {
  std::string text = kHfLlama;
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("every shipped config loads and validates") {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(kConfigs)) {
    if (entry.path().extension() != ".yaml") continue;
    INFO(entry.path());
    const ModelSpec spec = load_config(entry.path().string());
    CHECK(spec.name + ".yaml" == entry.path().filename().string());
    ++count;
  }
  CHECK(count >= 12);
}

TEST_CASE("real model shapes are the published ones") {
  const ModelSpec llama = load_config(kConfigs + "llama-3.2-1b.yaml");
  CHECK(llama.rope.type == RopeType::llama3);
  CHECK(llama.tie_word_embeddings);
  const ModelSpec qwen = load_config(kConfigs + "qwen3-0.6b.yaml");
  CHECK(qwen.head_dim * qwen.num_attention_heads != qwen.hidden_size);  // 16 × 128 vs 1024
  const ModelSpec lite = load_config(kConfigs + "deepseek-v2-lite.yaml");
  REQUIRE(lite.mla);
  CHECK(lite.mla->q_lora_rank == 0);
  CHECK(lite.mla->kv_lora_rank == 512);
  CHECK(lite.moe->n_routed_experts == 64);
  CHECK(lite.rope.type == RopeType::yarn);
  const ModelSpec v2 = load_config(kConfigs + "deepseek-v2.yaml");
  CHECK(v2.moe->topk_method == TopkMethod::group_limited_greedy);
  CHECK(v2.mla->q_lora_rank == 1536);
}

TEST_CASE("kiln YAML: missing, extra and mistyped fields are rejected naming the field") {
  check_yaml_rejection("  hidden_size: 64\n", "", "model.hidden_size", "missing field");
  check_yaml_rejection("  hidden_size: 64\n", "  hidden_size: 64\n  hiden_size: 3\n", "model.hiden_size", "unknown field");
  check_yaml_rejection("  hidden_size: 64", "  hidden_size: abc", "model.hidden_size", "positive integer");
  check_yaml_rejection("  hidden_size: 64", "  hidden_size: 6.5", "model.hidden_size", "positive integer");
  check_yaml_rejection("  tie_word_embeddings: true", "  tie_word_embeddings: yes please", "model.tie_word_embeddings",
                       "true or false");
  check_yaml_rejection("  family: llama", "  family: mistral", "model.family", "llama, qwen3, deepseek_v2");
  check_yaml_rejection("  dtype: bf16", "  dtype: fp8", "build.dtype", "bf16");
  check_yaml_rejection("  jit_ptx: false", "  jit_ptx: 0", "build.jit_ptx", "true or false");
  check_yaml_rejection("  rope_type: llama3", "  rope_type: dynamic", "model.rope_scaling.rope_type", "default, llama3, yarn");
}

TEST_CASE("kiln YAML: inconsistent shapes are rejected") {
  check_yaml_rejection("  num_key_value_heads: 2", "  num_key_value_heads: 3", "model.num_key_value_heads",
                       "must divide num_attention_heads");
  check_yaml_rejection("  hidden_size: 64", "  hidden_size: 0", "model.hidden_size", "positive integer");
  check_yaml_rejection("  intermediate_size: 160", "  intermediate_size: -4", "model.intermediate_size",
                       "positive integer");
  check_yaml_rejection("  head_dim: 16", "  head_dim: 15", "model.head_dim", "must be even");
  check_yaml_rejection("  max_context: 512", "  max_context: 4096", "build.max_context", "beyond the rope limit");
  check_yaml_rejection("  eos_token_id: 2", "  eos_token_id: 512", "model.eos_token_id", "not below vocab_size");
  check_yaml_rejection("  gpu_archs: [sm_90a]", "  gpu_archs: [sm_70]", "build.gpu_archs", "sm_90a");
  check_yaml_rejection("  max_batch: 8", "  max_batch: 1000", "build.max_batched_tokens", "expected 1000..");
  check_yaml_rejection("  max_batch: 8", "  max_batch: 8\n  megakernel_max_batch: 9", "build.megakernel_max_batch",
                       "expected 0..8");
  check_yaml_rejection("  max_batch: 8", "  max_batch: 8\n  megakernel_max_batch: -1", "build.megakernel_max_batch",
                       "expected an integer >= 0, got -1");
}

TEST_CASE("the whole-step decode kernel: dense models on one GPU get it, others run op by op") {
  auto ops = [](ModelSpec spec) { return decode_step_ops(spec, build_graph(spec)).has_value(); };
  for (const char* dense : {"tiny-llama", "tiny-qwen3", "tiny-smollm2", "llama-3.1-8b", "qwen3-8b"}) {
    INFO(dense);
    CHECK(ops(load_config(kConfigs + dense + ".yaml")));
  }
  CHECK_FALSE(ops(load_config(kConfigs + "tiny-deepseek-v2-lite.yaml")));  // MLA and MoE: not (yet) in the kernel
  ModelSpec off = load_config(kConfigs + "tiny-llama.yaml");
  off.build.megakernel_max_batch = 0;
  CHECK_FALSE(ops(off));
  ModelSpec rank = load_config(kConfigs + "tiny-llama.yaml");
  rank.ranks = 2;  // a tensor-parallel rank's build: its row-parallel sums need collectives between stages
  CHECK_FALSE(ops(rank));
}

// Which norms, attentions and silu·muls write their projection's FP8 inputs in the prefill
// (fuse.cpp): each projection of FP8 shape whose rows nothing else reads, and no other.
TEST_CASE("FP8 inputs: a norm, attention or silu·mul writes them for the projection after it, where nothing else reads its rows") {
  const auto paired = [](const char* config) {
    const Graph g = build_graph(load_config(kConfigs + config + ".yaml"));
    std::vector<std::string> out;  // "op arg weight", the first layer block's, in order (a fused op's parts)
    const auto add = [&](const Op& op) {
      for (const char* arg : {"out_fp8", "act_fp8", "in_fp8"}) {
        if (op.args.count(arg)) {
          out.push_back(std::string(op_name(op.kind)) + " " + arg + " " + op.args.at(arg) + (op.fp8_per_head ? " per head" : ""));
        }
      }
    };
    for (const auto& [stage, ops] : g.blocks.front().stages) {
      for (const Op& op : ops) {
        add(op);
        for (const Op& part : op.parts) add(part);
      }
    }
    return out;
  };
  using V = std::vector<std::string>;
  // The attention sees a row one head at a time: its pair's inputs are scaled per 128 columns.
  const V llama = {"rmsnorm out_fp8 qkv_proj",     "linear in_fp8 qkv_proj",     "attention out_fp8 o_proj per head",
                   "linear in_fp8 o_proj per head", "rmsnorm out_fp8 gate_up_proj", "linear in_fp8 gate_up_proj",
                   "silu_mul act_fp8 down_proj",   "linear in_fp8 down_proj"};
  CHECK(paired("llama-3.1-8b") == llama);
  CHECK(paired("qwen3-8b") == llama);
  CHECK(paired("llama-3.2-1b") == llama);  // head dim 64: the attention's own pass makes them (attention_prefill.cuh)
  CHECK(paired("smollm2-135m").empty());  // 576 columns: no FP8 GEMM shape
  // DeepSeek-V2-Lite's first (dense) layer: its input norm feeds q_proj and kv_a_proj_with_mqa, and
  // silu·mul's 10,944 columns are no FP8 GEMM shape; only the MLP's norm pairs.
  CHECK(paired("deepseek-v2-lite") == V{"rmsnorm out_fp8 gate_up_proj", "linear in_fp8 gate_up_proj"});
  // Its MoE layers' norm feeds the router, the shared experts and the routed ones, and the shared
  // experts' silu·mul has 2,816 columns: none pairs.
  const Graph lite = build_graph(load_config(kConfigs + "deepseek-v2-lite.yaml"));
  for (const auto& [stage, ops] : lite.blocks.back().stages) {
    for (const Op& op : ops) {
      INFO(op.label);
      CHECK(op.args.count("out_fp8") + op.args.count("act_fp8") + op.args.count("in_fp8") == 0);
    }
  }
}

TEST_CASE("Pending sums: a decode residual projection leaves its split sums to the RMSNorm right after it") {
  // "op weight: expression", every layer block's in order.
  const auto paired = [](const char* config) {
    const Graph g = build_graph(load_config(kConfigs + config + ".yaml"));
    std::vector<std::string> out;
    for (const LayerBlock& block : g.blocks) {
      for (const auto& [stage, ops] : block.stages) {
        for (const Op& op : ops) {
          if (op.pending_sums.empty()) continue;
          const std::string& weight = op.args.at("weight");
          out.push_back(std::string(op_name(op.kind)) + " " + weight + ": " + op.pending_sums);
        }
      }
    }
    return out;
  };
  using V = std::vector<std::string>;
  // o_proj with the norm after it; down_proj with the next layer's first op, but in the last layer.
  const V dense = {"rmsnorm input_layernorm: &pending", "linear o_proj: &pending",
                   "rmsnorm post_attention_layernorm: &pending",
                   "linear down_proj: layer + 1 < kNumLayers ? &pending : nullptr"};
  CHECK(paired("llama-3.2-1b") == dense);
  CHECK(paired("qwen3-0.6b") == dense);
  CHECK(paired("llama-3.1-8b") == dense);  // its GEMVs add their splits in the block: nothing is left at run time
  // DeepSeek-V2-Lite: its dense first layer as above, within that block; its MoE layers end in the
  // routed experts, so only o_proj pairs there (kv_a_proj and the shared experts run beside).
  CHECK(paired("deepseek-v2-lite") == V{"rmsnorm input_layernorm: &pending", "linear o_proj: &pending",
                                        "rmsnorm post_attention_layernorm: &pending",
                                        "linear down_proj: layer + 1 < kFirstKDenseReplace ? &pending : nullptr",
                                        "linear o_proj: &pending", "rmsnorm post_attention_layernorm: &pending"});
}

// linear_act (fuse.cpp): the gate | up projection and its SwiGLU are one decode kernel in every
// family (DeepSeek's dense layer and shared experts too); the prefill runs cuBLASLt, then silu_mul.
TEST_CASE("gate_up_proj and silu·mul are one kernel at decode, two in the prefill") {
  for (const char* config : {"llama-3.2-1b", "qwen3-0.6b", "smollm2-135m", "deepseek-v2-lite"}) {
    INFO(config);
    const ModelSpec spec = load_config(kConfigs + config + ".yaml");
    const Graph g = build_graph(spec);
    const std::string forward = emit_forward_cu(spec, g);
    const size_t decode = forward.find("void forward_decode(");
    REQUIRE(decode != std::string::npos);
    const std::string prefill = forward.substr(0, decode);
    CHECK(prefill.find("cuda::linear<kLinearGateUpProj>(ctx, h, ") != std::string::npos);
    CHECK(prefill.find("silu_mul_act_prefill(gate_up, act, ") != std::string::npos);
    CHECK(forward.find("linear_act_gate_up_proj(h, lw.gate_up_proj, gate_up, act, T, ctx.scratch, stream);", decode) !=
          std::string::npos);
    CHECK(forward.find("silu_mul_act_decode(", decode) == std::string::npos);
    // The kernel's shape: the fused linear's, and silu_mul's dim.
    CHECK(emit_model_hpp(spec, g).find("constexpr shape::linear_act kLinearActGateUpProj{.n = kGateUpWidth, .k = "
                                       "kHiddenSize, .sms = kTargetSms, .stacked = true, .rank_slice = false, .dim = "
                                       "kIntermediateSize};") != std::string::npos);
  }
}

TEST_CASE("DeepSeek-V2's GPU prefill expands K and V from the latent once a full chunk pays (171 tokens)") {
  // latent·(nope + v) / (2·latent - nope - v) = 512·256 / 768 ≈ 170.7 new tokens a chunk.
  ModelSpec spec = load_config(kConfigs + "deepseek-v2-lite.yaml");
  for (const int64_t tokens : {170, 171, 2048}) {
    INFO("max_batched_tokens " << tokens);
    spec.build.max_batched_tokens = tokens;
    const Graph g = build_graph(spec);
    const std::string forward = emit_forward_cu(spec, g), model = emit_model_cpp(spec, g);
    const bool expands = tokens > 170;
    CHECK((forward.find("cuda::mla_attention_expanded<kMlaAttentionExpanded>(ctx, q, lw.w_uk, lw.w_uv, kv, attn, step);") !=
           std::string::npos) == expands);
    CHECK((forward.find("mla_attention_prefill(q_mla, kv, o_lat,") != std::string::npos) == !expands);
    CHECK((model.find(".gpu_mla_expanded_bytes = ") != std::string::npos) == expands);
    // Decode stays absorbed either way; the CPU reference too.
    CHECK(forward.find("mla_attention_decode(q_mla, kv, o_lat,") != std::string::npos);
    CHECK(emit_forward_ref(spec, g).find("mla_attention(kMlaAttention,") != std::string::npos);
  }
}

// The ops beside the others (Op::beside), at decode and prefill alike: a MoE layer forks the side
// stream for the latent's projection (kv_a_proj_with_mqa) beside the query's and joins it before the
// MLA prep, then forks again for the shared experts (gate | up, SwiGLU, down into shared_out) beside
// the routing and the routed experts' gate | up, and joins before the routed down projection, whose
// sum adds shared_out; nothing the other ops touch in between shares their bytes.
TEST_CASE("DeepSeek-V2's kv_a projection and shared experts run beside the other ops, in bytes of their own") {
  ModelSpec spec = load_config(kConfigs + "deepseek-v2-lite.yaml");
  const Graph g = build_graph(spec);
  const std::string forward = emit_forward_cu(spec, g);
  const size_t decode = forward.find("void forward_decode(");
  REQUIRE(decode != std::string::npos);
  size_t at = forward.find("---- decoder_layer (DeepSeekMoE) ----", decode);
  for (const char* line :
       {"cudaStream_t side = ctx.fork(T);",
        "linear_kv_a_proj_with_mqa(h, lw.kv_a_proj_with_mqa, kv_a, T, ctx.side_scratch, nullptr, side);", "linear_q_proj(h,",
        "ctx.join(side);", "mla_prep(", "side = ctx.fork(T);   // again",
        "linear_act_shared_gate_up(h, lw.shared_gate_up, shared_gate_up, shared_act, T, ctx.side_scratch, side);",
        "linear_shared_down(shared_act, lw.shared_down, shared_out, T, ctx.side_scratch, nullptr, side);", "linear_router(h,",
        "moe_experts_gate_up_act_decode(", "ctx.join(side);",
        "moe_experts_down_decode(moe_act, lw.experts_down, topk_ids, topk_weights, moe_scratch, moe_pairs, shared_out, x,"}) {
    INFO(line);
    REQUIRE(at != std::string::npos);
    at = forward.find(line, at);
    CHECK(at != std::string::npos);
  }
  CHECK(forward.find("ctx.fork(", at) == std::string::npos);  // two forks a layer
  // The prefill forks the same ops by fork_prefill, its projections on the side's cuBLASLt runner.
  const std::string prefill = forward.substr(0, decode);
  at = prefill.find("---- decoder_layer (DeepSeekMoE) ----");
  for (const char* line :
       {"cudaStream_t side = ctx.fork_prefill();",
        "cuda::linear<kLinearKvAProjWithMqa>(ctx.beside(side), h, Fp8Rows{}, lw.kv_a_proj_with_mqa, kv_a, T);",
        "cuda::linear<kLinearQProj>(ctx, h,", "ctx.join(side);", "mla_prep(", "side = ctx.fork_prefill();   // again",
        "cuda::linear<kLinearSharedGateUp>(ctx.beside(side), h, Fp8Rows{}, lw.shared_gate_up, shared_gate_up, T);",
        "silu_mul_shared_act_prefill(shared_gate_up, shared_act, Fp8Rows{}, T, side);",
        "cuda::linear<kLinearSharedDown>(ctx.beside(side), shared_act, Fp8Rows{}, lw.shared_down, shared_out, T);",
        "cuda::linear<kLinearRouter>(ctx, h,", "moe_experts_gate_up_act_prefill(", "ctx.join(side);",
        "moe_experts_down_prefill(moe_act, lw.experts_down, topk_ids, topk_weights, moe_scratch, moe_pairs, shared_out, x,"}) {
    INFO(line);
    REQUIRE(at != std::string::npos);
    at = prefill.find(line, at);
    CHECK(at != std::string::npos);
  }
  CHECK(prefill.find("ctx.fork(") == std::string::npos);
  CHECK(prefill.find("ctx.fork_prefill(", at) == std::string::npos);
  CHECK(emit_model_cpp(spec, g).find(".side_stream = true,") != std::string::npos);

  const ArenaPlan plan = plan_arena(g, spec.build.max_batched_tokens, 2);
  auto bytes = [&](const std::string& name) {
    const int64_t first = plan.offset.at(name);
    return std::pair{first, first + g.value(g.buffer(name).per_token) * spec.build.max_batched_tokens * 2};
  };
  const std::vector<std::string> routed = {"router_logits", "topk_ids",  "topk_weights", "moe_gate_up",
                                           "moe_act",       "moe_scratch", "moe_pairs"};
  for (const auto& [side, others] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"kv_a", {"q"}}, {"shared_gate_up", routed}, {"shared_act", routed}, {"shared_out", routed}}) {
    for (const std::string& other : others) {
      INFO(side << " and " << other);
      const auto [a0, a1] = bytes(side);
      const auto [b0, b1] = bytes(other);
      CHECK((a1 <= b0 || b1 <= a0));
    }
  }

  spec.ranks = 2;  // tensor parallelism: the shared experts' share first, all on one stream
  const Graph rank = build_graph(spec);
  const std::string rank_forward = emit_forward_cu(spec, rank);
  CHECK(rank_forward.find("ctx.fork(") == std::string::npos);
  CHECK(rank_forward.find("ctx.fork_prefill(") == std::string::npos);
  CHECK(rank_forward.find("shared_out") == std::string::npos);  // the shared share goes into x, then the all-reduce
  CHECK(emit_model_cpp(spec, rank).find(".side_stream") == std::string::npos);
}

// Graph::decode_gemm_past_pass: builds that decode more than one GEMV pass (max_batch > 64) ask
// cuda::decode_on_gemm before each projection of a decode step whether it runs on cuBLASLt
// (cuda::decode_linear); the shipped configs (max_batch 64) and a tensor-parallel rank never do.
TEST_CASE("Builds of max_batch past one GEMV pass take cuBLASLt for the projections of larger decode steps") {
  struct Expect {
    const char* config;
    std::vector<std::string> lines;  // in forward_decode
  };
  const std::vector<Expect> cases = {
      {"deepseek-v2-lite.yaml",
       {"if (cuda::decode_on_gemm(ctx, lw.q_proj, T)) {", "  cuda::decode_linear<kLinearQProj>(ctx, h, lw.q_proj, q, T);",
        "} else {", "  linear_q_proj(h, lw.q_proj, q, T, ctx.scratch, nullptr, stream);",
        "if (cuda::decode_on_gemm(ctx, w.lm_head, N)) {", "  cuda::decode_linear<kLinearLmHead>(ctx, h, w.lm_head, logits, N);"}},
      {"llama-3.1-8b.yaml",
       {"if (cuda::decode_on_gemm(ctx, lw.o_proj, T)) {",
        // linear_act: past a pass its parts, cuBLASLt then silu_mul
        "if (cuda::decode_on_gemm(ctx, lw.gate_up_proj, T)) {",
        "  cuda::decode_linear<kLinearGateUpProj>(ctx, h, lw.gate_up_proj, gate_up, T);",
        "  silu_mul_act_decode(gate_up, act, T, stream);", "} else {",
        "  linear_act_gate_up_proj(h, lw.gate_up_proj, gate_up, act, T, ctx.scratch, stream);",
        "if (cuda::decode_on_gemm(ctx, lw.down_proj, T)) {", "if (cuda::decode_on_gemm(ctx, w.lm_head, N)) {"}},
  };
  for (const Expect& c : cases) {
    INFO(c.config);
    ModelSpec spec = load_config(kConfigs + c.config);
    const std::string shipped = emit_forward_cu(spec, build_graph(spec));
    CHECK(shipped.find("decode_on_gemm") == std::string::npos);
    spec.build.max_batch = 256;
    const Graph g = build_graph(spec);
    const std::string forward = emit_forward_cu(spec, g);
    const size_t decode = forward.find("void forward_decode(");
    REQUIRE(decode != std::string::npos);
    for (const std::string& line : c.lines) {
      INFO(line);
      CHECK(forward.find(line, decode) != std::string::npos);
    }
    REQUIRE(forward.find("void forward_prefill(") < decode);
    CHECK(forward.substr(0, decode).find("decode_on_gemm") == std::string::npos);  // the prefill is cuBLASLt already
    CHECK(emit_model_hpp(spec, g).find("constexpr int kDecodeGemmAbove = 64;") != std::string::npos);
    CHECK(emit_model_cpp(spec, g).find(".decode_gemm_above = kDecodeGemmAbove,") != std::string::npos);
    spec.ranks = 2;  // a rank's projections keep the GEMV
    CHECK(emit_forward_cu(spec, build_graph(spec)).find("decode_on_gemm") == std::string::npos);
  }
}

TEST_CASE("build.jit_ptx: the model's CMakeLists adds PTX for newer GPUs unless the config turns it off") {
  ModelSpec spec = load_config(kConfigs + "tiny-llama.yaml");
  REQUIRE_FALSE(spec.build.jit_ptx);
  spec.build.gpu_archs = {"sm_90a", "sm_80"};
  const std::string sass_only = emit_cmake(spec, build_graph(spec));
  CHECK(sass_only.find("-gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80>") != std::string::npos);
  CHECK(sass_only.find("code=compute_") == std::string::npos);
  spec.build.jit_ptx = true;  // the default: PTX of the oldest architecture, without the "a" suffix
  const std::string with_ptx = emit_cmake(spec, build_graph(spec));
  CHECK(with_ptx.find("code=sm_80 -gencode=arch=compute_80,code=compute_80>") != std::string::npos);
  CHECK(load_config(kConfigs + "llama-3.2-1b.yaml").build.jit_ptx);
}

TEST_CASE("kiln YAML: tensor-parallel sizes that do not split the model evenly are rejected") {
  const std::string tp = "  tensor_parallel: [2, 4]";
  // 3 ranks: 4 attention heads, 160 MLP features and 512 vocabulary rows do not split in three.
  check_yaml_rejection(tp, "  tensor_parallel: [3]", "build.tensor_parallel", "do not divide num_attention_heads (4)");
  check_yaml_rejection(tp, "  tensor_parallel: [8]", "build.tensor_parallel", "do not divide num_attention_heads");
  check_yaml_rejection(tp, "  tensor_parallel: [1]", "build.tensor_parallel", ">= 2");
  check_yaml_rejection(tp, "  tensor_parallel: [128]", "build.tensor_parallel", "expected 2 to 64");
  check_yaml_rejection(tp, "  tensor_parallel: [2, 2]", "build.tensor_parallel", "names 2 twice");
  check_yaml_rejection(tp, "  tensor_parallel: two", "build.tensor_parallel", "integer");
  // SmolLM2's 9 heads and 640-row vocabulary: no even split at 2, 3 or 4 ranks.
  const std::string archs = "  gpu_archs: [sm_90a]";
  std::string smol = read(kConfigs + "tiny-smollm2.yaml");
  smol.replace(smol.find(archs), archs.size(), archs + "\n  tensor_parallel: [3]");
  std::string m = load_error(temp_config(smol, ".yaml"));
  CHECK(m.find("do not divide vocab_size (640)") != std::string::npos);
  // DeepSeek-V2: heads, routed experts, the dense and the shared experts' features must all split.
  const std::string ds_tp = "  tensor_parallel: [2, 4]";
  const std::string ds = read(kConfigs + "tiny-deepseek-v2.yaml");
  auto ds_error = [&](const std::vector<std::pair<std::string, std::string>>& edits, const std::string& ranks) {
    std::string t = ds;
    t.replace(t.find(ds_tp), ds_tp.size(), "  tensor_parallel: [" + ranks + "]");
    for (const auto& [from, to] : edits) t.replace(t.find(from), from.size(), to);
    return load_error(temp_config(t, ".yaml"));
  };
  CHECK(ds_error({}, "3").find("do not divide num_attention_heads (4)") != std::string::npos);
  m = ds_error({{"  moe_intermediate_size: 24", "  moe_intermediate_size: 22"}}, "4");
  CHECK(m.find("do not divide n_shared_experts × moe_intermediate_size (the shared experts' features) (22)") !=
        std::string::npos);
  m = ds_error({{"  n_routed_experts: 8", "  n_routed_experts: 6"}, {"  n_group: 4", "  n_group: 2"},
                {"  topk_group: 2", "  topk_group: 1"}},
               "4");
  CHECK(m.find("do not divide n_routed_experts") != std::string::npos);
  m = ds_error({{"  n_shared_experts: 1", "  n_shared_experts: 0"}}, "2");
  CHECK(m.find("n_shared_experts is 0") != std::string::npos);
  // The DeepSeek-V2-Lite fixture (3 heads, 80 dense MLP features) splits at no rank count.
  std::string lite = read(kConfigs + "tiny-deepseek-v2-lite.yaml");
  lite.replace(lite.find(archs), archs.size(), archs + "\n  tensor_parallel: [3]");
  m = load_error(temp_config(lite, ".yaml"));
  CHECK(m.find("do not divide intermediate_size (the dense layers' MLP) (80)") != std::string::npos);
}

TEST_CASE("kiln YAML: DeepSeek MoE routing options are checked") {
  std::string text = read(kConfigs + "tiny-deepseek-v2.yaml");
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return temp_config(t, ".yaml");
  };
  std::string m = load_error(with("  num_experts_per_tok: 3", "  num_experts_per_tok: 9"));
  CHECK(m.find("model.num_experts_per_tok") != std::string::npos);
  CHECK(m.find("exceeds n_routed_experts") != std::string::npos);
  m = load_error(with("  topk_group: 2", "  topk_group: 5"));
  CHECK(m.find("model.topk_group") != std::string::npos);
  CHECK(m.find("exceeds n_group") != std::string::npos);
  m = load_error(with("  n_group: 4", "  n_group: 3"));
  CHECK(m.find("must divide n_routed_experts") != std::string::npos);
}

TEST_CASE("kiln YAML: malformed files give one-line errors") {
  CHECK(load_error(temp_config("name: [unclosed\n", ".yaml")).find("not valid YAML") != std::string::npos);
  CHECK(load_error(temp_config("", ".yaml")).find("empty") != std::string::npos);
  CHECK(load_error("/nonexistent/x.yaml").find("cannot read") != std::string::npos);
  CHECK(load_error(temp_config("x", ".txt")).find("unknown config kind") != std::string::npos);
}

TEST_CASE("HF config.json imports onto the same spec") {
  const ModelSpec spec = load_config(temp_config(kHfLlama, ".json", "Odd_Shape"));
  CHECK(spec.name == "odd-shape");  // from the folder, lowercased, '_' -> '-'
  CHECK(load_config(temp_config(kHfLlama, ".json", "7b")).name == "model-7b");  // names start with a letter
  CHECK(spec.family == Family::llama);
  CHECK(spec.head_dim == 48);
  CHECK(spec.num_key_value_heads == 2);
  CHECK(spec.intermediate_size == 200);
  CHECK(spec.build.max_context == 1024);
  CHECK(spec.build.tensor_parallel.empty());

  // kilnc --tensor-parallel 2: the same checks as build.tensor_parallel, named after the option.
  ImportOptions tp;
  tp.tensor_parallel = {2};
  CHECK(load_config(temp_config(kHfLlama, ".json"), tp).build.tensor_parallel == std::vector<int64_t>{2});
  tp.tensor_parallel = {3};
  try {
    load_config(temp_config(kHfLlama, ".json"), tp);
    FAIL("3 ranks accepted");
  } catch (const kiln::Error& e) {
    CHECK(std::string(e.what()).find("kilnc option --tensor-parallel") != std::string::npos);
  }

  // The older rope_scaling / rope_theta keys work too.
  const ModelSpec old = load_config(temp_config(
      hf_with(R"("rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"})",
              R"("rope_theta": 500000.0, "rope_scaling": {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 256})"),
      ".json"));
  CHECK(old.rope.theta == 500000.0);
  CHECK(old.rope.type == RopeType::llama3);
  CHECK(old.rope.factor == 8.0);
}

TEST_CASE("HF config.json: unknown model types and unsupported options are rejected with what is supported") {
  auto error_of = [](const std::string& json) { return load_error(temp_config(json, ".json")); };
  std::string m = error_of(hf_with(R"("model_type": "llama")", R"("model_type": "mistral")"));
  CHECK(m.find("model_type") != std::string::npos);
  CHECK(m.find("llama, qwen3, deepseek_v2") != std::string::npos);
  m = error_of(hf_with(R"("hidden_act": "silu")", R"("hidden_act": "gelu")"));
  CHECK(m.find("hidden_act") != std::string::npos);
  CHECK(m.find("supported: silu") != std::string::npos);
  m = error_of(hf_with(R"("rope_type": "default")", R"("rope_type": "longrope")"));
  CHECK(m.find("rope_type") != std::string::npos);
  CHECK(m.find("default, llama3, yarn") != std::string::npos);
  m = error_of(hf_with(R"("hidden_act": "silu")", R"("hidden_act": "silu", "attention_bias": true)"));
  CHECK(m.find("attention_bias") != std::string::npos);
  m = error_of(hf_with(R"("num_key_value_heads": 2)", R"("num_key_value_heads": 4)"));
  CHECK(m.find("num_key_value_heads") != std::string::npos);
  m = error_of(hf_with(R"("hidden_size": 288)", R"("hidden_size": "288")"));
  CHECK(m.find("hidden_size") != std::string::npos);
  CHECK(error_of("{ not json").find("not valid JSON") != std::string::npos);
}
