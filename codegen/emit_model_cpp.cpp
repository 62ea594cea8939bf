// weights.inc (the weight manifest), model.cpp (the model as the runtime sees it) and main.cpp
// (the binary's entry point).
#include <algorithm>

#include "codegen/architecture_fields.hpp"
#include "codegen/decode_step.hpp"
#include "codegen/emit.hpp"
#include "codegen/graph_build.hpp"

namespace kiln::codegen {

namespace {

std::string source_text(const WeightSource& s) {
  if (s.hf_rows > 0 || s.rank_experts > 0) {  // a tensor-parallel rank's slice: every field named
    std::string out = "{.hf_name = \"" + s.hf_name + "\", .rows = " + num(s.rows);
    if (s.row_begin != 0) out += ", .row_begin = " + num(s.row_begin);
    if (s.groups != 1) out += ", .groups = " + num(s.groups) + ", .group_stride = " + num(s.group_stride);
    if (s.rank_rows != 0) out += ", .rank_rows = " + num(s.rank_rows);
    if (s.cols != 0) out += ", .rank_cols = " + num(s.rank_cols) + ", .cols = " + num(s.cols);
    if (s.rank_group != 1) out += ", .rank_group = " + num(s.rank_group);
    if (s.hf_rows > 0) out += ", .hf_rows = " + num(s.hf_rows) + ", .hf_cols = " + num(s.hf_cols);
    if (s.rank_experts > 0) out += ", .rank_experts = " + num(s.rank_experts);
    return out + "}";
  }
  std::string out = "{\"" + s.hf_name + "\", " + num(s.rows);
  if (s.row_begin != 0 || s.groups != 1) out += ", " + num(s.row_begin);
  if (s.groups != 1) out += ", " + num(s.groups) + ", " + num(s.group_stride);
  return out + "}";
}

// A C++ string literal: quotes, backslashes and control characters escaped.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string emit_weights_inc(const ModelSpec& spec, const Graph& g) {
  Code c;
  c.line(banner(spec, "Weight manifest: each kiln weight, its shape, and the HF tensors (rows) it is built from."));
  c.comment("Entries: {kiln name, per layer, first layer, last layer (exclusive), shape, experts,");
  c.comment("          {alternative layouts: {{HF tensor, rows[, first row[, groups, group stride]]}, ...}}, tied to,");
  c.comment("          matrix: read by linear ops or the embedding lookup only, so a backend may keep a GGUF file's");
  c.comment("          quantized blocks[, lookup: read by the embedding lookup only]}");
  c.comment("{L} is the layer index and {E} the expert index. Included by model.cpp.");
  if (spec.ranks > 1) {
    c.comment("A tensor-parallel rank's slices name their fields: rank q = rank / rank_group takes the rows");
    c.comment("q × rank_rows further, or the columns [q × rank_cols, + cols), of an HF tensor of hf_rows × hf_cols.");
    if (spec.moe) c.comment("A source with rank_experts holds one rank's experts: {E} counts from rank × rank_experts.");
  }
  for (const WeightDecl& w : g.weights) {
    c.line();
    c.comment(w.comment);
    std::string layouts;
    for (size_t i = 0; i < w.layouts.size(); ++i) {
      std::string sources;
      for (size_t j = 0; j < w.layouts[i].size(); ++j) sources += (j ? ", " : "") + source_text(w.layouts[i][j]);
      layouts += (i ? ", " : "") + std::string("{") + sources + "}";
    }
    const std::string layers = w.per_layer ? "true, " + num(w.layer_first) + ", " + num(w.layer_last) : "false, 0, 0";
    std::string shape;
    for (size_t i = 0; i < w.shape.size(); ++i) shape += (i ? ", " : "") + num(w.shape[i]);
    c.line("{" + quoted(w.name) + ", " + layers + ", {" + shape + "}, " + num(w.experts) + ", {" + layouts + "}, " +
           quoted(w.tied_to) + ", " + (w.matrix ? "true" : "false") + (w.lookup ? ", true" : "") + "},");
  }
  return c.str();
}

std::string emit_model_cpp(const ModelSpec& s, const Graph& g) {
  Code c;
  c.line(banner(s, s.ranks > 1 ? "One tensor-parallel rank as the runtime sees it: its numbers, weight slices and backend factories."
                               : "The model as the runtime sees it: its numbers, weight manifest and backend factories."));
  c.line("#include \"model.hpp\"");
  c.line();
  c.line("namespace " + s.ns() + " {");
  c.line();
  for (int64_t t : s.build.tensor_parallel) {
    c.line(pad("namespace tp" + num(t) + " { const ModelDef& model_def(); }", 70) + "// tp" + num(t) + "/model.cpp: one of " + num(t) + " ranks");
  }
  if (!s.build.tensor_parallel.empty()) c.line();
  c.line("namespace {");
  c.line("const std::vector<WeightSpec> kWeights = {");
  c.line("#include \"weights.inc\"");
  c.line("};");
  c.line("}  // namespace");
  c.line();
  c.line("const ModelDef& model_def() {");
  c.indent();
  c.line("static const ModelDef def{");
  c.indent();
  c.line("ModelInfo{");
  c.indent();
  std::string eos;
  for (size_t i = 0; i < s.eos_token_ids.size(); ++i) eos += (i ? ", " : "") + num(s.eos_token_ids[i]);
  const bool mla = s.mla.has_value();
  const RopeSpec& r = s.rope;
  auto field = [&](const std::string& name, const std::string& value) { c.line("." + name + " = " + value + ","); };
  field("name", quoted(s.name));
  if (s.ranks > 1) field("tensor_parallel", "kRanks");
  field("family", quoted(to_string(s.family)));
  field("source", quoted(s.source));
  field("vocab_size", "kVocabSize");
  field("hidden_size", "kHiddenSize");
  field("num_layers", "kNumLayers");
  field("max_context", "kMaxContext");
  field("page_size", "kPageSize");
  field("max_batch", "kMaxBatch");
  field("max_batched_tokens", "kMaxBatchedTokens");
  field("kv_elems_per_token", "kKvElemsPerToken");
  field("bos_token_id", num(s.bos_token_id));
  field("eos_token_ids", "{" + eos + "}");
  field("chat_template", quoted(to_string(s.chat_format)));
  field("chat_default_system", quoted(s.chat_default_system));
  std::string rope = "RopeInfo{.kind = RopeKind::" + std::string(r.type == RopeType::standard ? "standard"
                                                                   : r.type == RopeType::llama3 ? "llama3"
                                                                                                : "yarn") +
                     ", .theta = kRopeTheta, .rotary_dim = " + (mla ? "kQkRopeHeadDim" : "kHeadDim") +
                     ", .interleaved = " + (mla ? "true" : "false");
  if (r.type != RopeType::standard) {
    rope += ", .factor = kRopeFactor, .original_max_position_embeddings = kRopeOriginalMaxPositions";
  }
  if (r.type == RopeType::llama3) rope += ", .low_freq_factor = kRopeLowFreqFactor, .high_freq_factor = kRopeHighFreqFactor";
  if (r.type == RopeType::yarn) {
    rope += ", .beta_fast = kRopeBetaFast, .beta_slow = kRopeBetaSlow, .mscale = kRopeMscale, "
            ".mscale_all_dim = kRopeMscaleAllDim";
  }
  field("rope", rope + "}");
  field("ref_arena_bytes", "RefArena::bytes");
  field("gpu_arena_bytes", "GpuArena::bytes");
  field("gpu_scratch_bytes", "kDecodeScratchFloats * static_cast<int64_t>(sizeof(float))");
  if (has_beside_ops(g)) {
    field("side_stream", "true");
    field("gpu_side_scratch_bytes", "kSideScratchFloats * static_cast<int64_t>(sizeof(float))");
  }
  field("gpu_decode_counter_words", "kDecodeCounterWords");
  field("decode_weight_bytes", "kDecodeWeightBytes");
  field("routed_expert_bytes", "kRoutedExpertBytes");
  field("num_routed_experts", s.moe ? "kNumExperts" : "0");
  field("num_attention_heads", "kNumHeads");
  field("num_key_value_heads", mla ? "kNumHeads" : "kNumKvHeads");
  field("head_dim", mla ? "0" : "kHeadDim");
  field("tie_word_embeddings", s.tie_word_embeddings ? "true" : "false");
  field("intermediate_size", "kIntermediateSize");
  field("rms_norm_eps", "kRmsNormEps");
  c.line(".config_fields = {");
  c.indent();
  for (const ArchitectureField& f : architecture_fields(s)) {
    c.line("{" + quoted(f.name) + ", " + quoted(f.value) + ", " + (f.real ? "true" : "false") + "},");
  }
  c.dedent();
  c.line("},");
  if (decode_step_ops(s, g)) {
    field("megakernel_max_batch", "kMegakernelMaxBatch");
    field("step_sync_words", "kStepSyncWords");
  }
  const std::vector<const Op*> ops = g.all_ops();
  if (std::any_of(ops.begin(), ops.end(), [](const Op* op) { return op->kind == OpKind::mla_attention_expanded; })) {
    // templates/mla_attention_expanded.cuh's MlaExpanded
    field("gpu_mla_expanded_bytes", "kMlaExpandedKeys * kMlaExpandedValuesPerKey * int64_t{2}");
  }
  if (g.decode_gemm_past_pass) field("decode_gemm_above", "kDecodeGemmAbove");
  c.dedent();
  c.line("},");
  c.line("&kWeights,");
  c.line("&make_ref_forward,");
  c.line("&make_cuda_forward,");
  if (!s.build.tensor_parallel.empty()) {
    std::string builds;
    for (int64_t t : s.build.tensor_parallel) builds += std::string(builds.empty() ? "" : ", ") + "{" + num(t) + ", &tp" + num(t) + "::model_def}";
    c.line("{" + builds + "},");
  }
  c.dedent();
  c.line("};");
  c.line("return def;");
  c.dedent();
  c.line("}");
  c.line();
  c.line("}  // namespace " + s.ns());
  (void)g;
  return c.str();
}

std::string emit_main_cpp(const ModelSpec& s) {
  Code c;
  c.line(banner(s, "The binary's entry point: the runtime's command line, bound to this model."));
  c.line("#include \"model.hpp\"");
  c.line("#include \"runtime/cli/cli.hpp\"");
  c.line();
  c.line("int main(int argc, char** argv) { return kiln::run_cli(kiln::models::" + s.id() + "::model_def(), argc, argv); }");
  return c.str();
}

std::string emit_cmake(const ModelSpec& s, const Graph& g) {
  // SASS for every configured architecture, plus (build.jit_ptx) PTX of the oldest one (without the
  // "a" suffix, whose features are not forward compatible) so newer GPUs can JIT the kernels.
  std::string gencode;
  std::string oldest;
  for (const auto& arch : s.build.gpu_archs) {
    const std::string digits = arch.substr(3);
    gencode += " -gencode=arch=compute_" + digits + ",code=sm_" + digits;
    std::string plain = digits;
    if (!plain.empty() && plain.back() == 'a') plain.pop_back();
    if (oldest.empty() || std::stoi(plain) < std::stoi(oldest)) oldest = plain;
  }
  if (s.build.jit_ptx) gencode += " -gencode=arch=compute_" + oldest + ",code=compute_" + oldest;
  const std::string lib = "kiln_model_" + s.id();
  (void)g;
  Code c;
  std::string b = banner(s, "The model's library (kernels, GPU and CPU forwards) and its binary build/bin/" + s.name + ".");
  for (size_t i = 0; (i = b.find("//", i)) != std::string::npos;) b.replace(i, 2, "#");
  c.line(b);
  std::string sources = "kernels.cu forward.cu forward_ref.cpp model.cpp";
  for (int64_t t : s.build.tensor_parallel) {
    for (const char* file : {"kernels.cu", "forward.cu", "forward_ref.cpp", "model.cpp"}) sources += " tp" + num(t) + "/" + file;
  }
  c.line("add_library(" + lib + " STATIC " + sources + ")");
  c.line("target_include_directories(" + lib + " PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})");
  c.line("target_link_libraries(" + lib + " PUBLIC kiln_runtime)");
  c.line("target_compile_options(" + lib + " PRIVATE \"$<$<COMPILE_LANGUAGE:CUDA>:SHELL:" + gencode.substr(1) + ">\")");
  c.line();
  c.line("add_executable(" + s.name + " main.cpp)");
  c.line("target_link_libraries(" + s.name + " PRIVATE " + lib + ")");
  return c.str();
}

}  // namespace kiln::codegen
