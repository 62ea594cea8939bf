#include "runtime/cli/model_setup.hpp"

#include <algorithm>
#include <filesystem>

#include "runtime/chat/builtin_templates.hpp"
#include "runtime/chat/chat_encode.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/file_io.hpp"
#include "runtime/core/host_memory.hpp"
#include "runtime/core/parallel.hpp"
#include "runtime/core/strict_json.hpp"
#include "runtime/model/gguf_source.hpp"
#include "runtime/model/model_config_check.hpp"
#include "runtime/tokenizer/chat_template.hpp"

namespace kiln {

namespace {

namespace fs = std::filesystem;

// The tokenizer that goes with the weights, if there is one: --tokenizer, else the model
// directory's tokenizer.json, else the vocabulary of the --gguf file (already open). A GGUF of
// weights only has none: prompt ids still run, and text prompts ask for --tokenizer.
std::optional<Tokenizer> open_tokenizer(const CliOptions& o, const GgufFile* gguf) {
  if (!o.tokenizer.empty()) {
    if (fs::is_directory(o.tokenizer)) return Tokenizer::from_model_dir(o.tokenizer);
    if (o.tokenizer.ends_with(".gguf")) return Tokenizer::from_gguf_file(o.tokenizer);
    return Tokenizer::from_tokenizer_json(o.tokenizer);
  }
  if (!o.model_dir.empty() && fs::exists(fs::path(o.model_dir) / "tokenizer.json")) {
    return Tokenizer::from_model_dir(o.model_dir);
  }
  if (gguf == nullptr || !Tokenizer::gguf_has_vocabulary(*gguf)) return std::nullopt;
  return Tokenizer::from_gguf(*gguf);
}

// The folder holding the tokenizer's side files (tokenizer_config.json, generation_config.json).
std::string tokenizer_dir(const CliOptions& o) {
  if (!o.tokenizer.empty()) {
    if (fs::is_directory(o.tokenizer)) return o.tokenizer;
    if (!o.tokenizer.ends_with(".gguf")) return fs::path(o.tokenizer).parent_path().string();
    return "";
  }
  return o.model_dir;
}

}  // namespace

ModelSetup open_model(const ModelDef& model, const CliOptions& o) {
  const ModelInfo& m = model.info;
  ModelSetup s;
  // First: the tensor shapes alone may fit another model (other rope theta, eps, model_type).
  if (!o.model_dir.empty()) check_model_config(o.model_dir, m);
  // Opened once for the weights, the vocabulary and the chat template.
  if (!o.gguf.empty()) s.gguf = std::make_shared<const GgufFile>(o.gguf);
  s.tokenizer = open_tokenizer(o, s.gguf.get());
  if (s.tokenizer) s.structured = std::make_shared<StructuredOutputs>(*s.tokenizer);
  if (s.tokenizer && static_cast<int64_t>(s.tokenizer->vocab_size()) > m.vocab_size) {
    fail("the tokenizer (", s.tokenizer->describe(), ") has ", s.tokenizer->vocab_size(), " tokens but ", m.name,
         " has a vocabulary of ", m.vocab_size);
  }
  const std::string side_files = tokenizer_dir(o);
  s.defaults = read_generation_defaults(side_files.empty() ? o.model_dir : side_files);

  if (s.tokenizer) {
    std::string source, origin;
    if (!side_files.empty()) {
      source = find_chat_template(side_files);
      origin = side_files + "/tokenizer_config.json chat_template";
    }
    const GgufFile* gguf_file = s.gguf.get();
    std::unique_ptr<GgufFile> tokenizer_gguf;
    if (!o.tokenizer.empty() && o.tokenizer.ends_with(".gguf")) {
      tokenizer_gguf = std::make_unique<GgufFile>(o.tokenizer);
      gguf_file = tokenizer_gguf.get();
    }
    if (source.empty() && gguf_file) {
      source = find_chat_template(*gguf_file);
      origin = gguf_file->origin() + " tokenizer.chat_template";
    }
    if (source.empty()) {
      source = builtin_chat_template(m.chat_template, m.chat_default_system);
      origin = std::string("the built-in ") + m.chat_template + " template";
    }
    if (!source.empty()) {
      const Tokenizer& t = *s.tokenizer;
      s.chat_template.emplace(chat_template_for(t, source, origin));
      const std::optional<ChatFormat> format = guess_chat_format(t);
      s.chat_stop_ids = format ? chat_stop_ids(*format, t) : t.eos_ids();
    }
  }
  if (!o.model_dir.empty()) s.source = open_safetensors_source(o.model_dir);
  if (s.gguf) s.source = open_gguf_source(s.gguf, m);
  return s;
}

void load_backend(ModelSetup& s, const ModelDef& model, const CliOptions& o) {
  WeightOrigin origin{s.source.get(), o.random_weights.value_or(0)};
  BackendOptions options{o.kv_pages, o.gpu_mem_util, o.cuda_graphs, o.profile, o.megakernel, o.l2_warm, o.pdl};
  options.quantize = o.quantize == "fp8" ? Quantize::fp8 : Quantize::none;
  options.batch_invariant = o.batch_invariant;
  options.swap_space_bytes = o.swap_space_gib >= 0 ? static_cast<int64_t>(o.swap_space_gib * (1 << 30))
                                                  : std::min<int64_t>(int64_t{4} << 30, host_memory_available() / 4);
  const bool gpu = o.backend == "cuda" || (o.backend == "auto" && cuda_available());
  if (!gpu) set_parallel_threads(o.threads, true);
  if (o.tensor_parallel > 1) {
    // Simulated ranks are threads of the reference backend (a test of the split, not a speed-up).
    if (!gpu && o.backend != "ref") {
      fail("--tensor-parallel-size ", o.tensor_parallel, " without a GPU runs simulated ranks on the reference "
           "backend only: add --backend ref (or run on GPUs with --backend cuda)");
    }
    s.backend = make_tensor_parallel_backend(model, o.tensor_parallel, gpu, origin, options);
    return;
  }
  s.backend = gpu                  ? make_cuda_backend(model, origin, options)
              : o.backend == "ref" ? make_ref_backend(model, origin, options)
                                   : make_cpu_backend(model, origin, options);
}

EngineOptions engine_options(const CliOptions& o) {
  EngineOptions e;
  e.max_batch = o.max_batch;
  e.max_context = o.max_context;
  e.max_decode_slowdown = o.max_decode_slowdown;
  return e;
}

SamplingParams default_params(const CliOptions& o, const ModelSetup& setup) {
  const GenerationDefaults& d = setup.defaults;
  SamplingParams p;
  p.max_tokens = o.max_tokens;
  p.temperature = o.temperature.value_or(d.temperature.value_or(0.8f));
  p.top_p = o.top_p.value_or(d.top_p.value_or(0.95f));
  p.top_k = o.top_k.value_or(d.top_k.value_or(40));
  p.min_p = o.min_p.value_or(d.min_p.value_or(0.0f));
  p.repetition_penalty = o.repetition_penalty.value_or(d.repetition_penalty.value_or(1.0f));
  p.presence_penalty = o.presence_penalty;
  p.frequency_penalty = o.frequency_penalty;
  p.stop = o.stop;
  p.ignore_eos = o.ignore_eos;
  p.logprobs = o.logprobs;
  // Structured output: at most one flag (the option group checks), compiled once for every request.
  const char* flag = !o.grammar.empty() ? "--grammar" : !o.grammar_file.empty() ? "--grammar-file"
                     : !o.json_schema.empty() ? "--json-schema" : !o.json_schema_file.empty() ? "--json-schema-file"
                                                                                              : nullptr;
  if (flag == nullptr) return p;
  if (!setup.structured) fail(flag, " needs a tokenizer: give -m with a tokenizer.json, a .gguf, or --tokenizer");
  try {
    if (!o.grammar.empty() || !o.grammar_file.empty()) {
      p.constraint = setup.structured->grammar(o.grammar.empty() ? read_file(o.grammar_file) : o.grammar);
    } else {
      const std::string text = o.json_schema.empty() ? read_file(o.json_schema_file) : o.json_schema;
      p.constraint = setup.structured->json_schema(parse_ordered_json_strict(text, "the schema"));  // in its key order
    }
  } catch (const Error& e) {
    fail(flag, ": ", e.what());
  }
  return p;
}

}  // namespace kiln
