// libFuzzer: a --prompts-file (JSONL request lines), turned into requests as the model binary
// does: strict JSON, typed fields, prompts encoded and chats rendered with a small ChatML
// tokenizer and the built-in ChatML template. Bad lines become per-line errors; only a bad file
// as a whole throws.
#include "runtime/chat/builtin_templates.hpp"
#include "runtime/cli/requests.hpp"
#include "tests/fuzz/fuzz_support.hpp"
#include "tests/support/chatml_tokenizer.hpp"

namespace {

// The tokenizer and the built-in ChatML template, as open_model() would find them.
kiln::ModelSetup model_setup() {
  kiln::ModelSetup s;
  s.tokenizer = kiln::Tokenizer::from_tokenizer_json(
      kiln::fuzz::write_input("tokenizer.json", kiln::test::chatml_tokenizer_json().dump()));
  s.chat_template.emplace(kiln::builtin_chat_template("chatml", ""), "", "<|endoftext|>", "the built-in chatml template");
  s.chat_stop_ids = {257, 258};
  return s;
}

kiln::ModelInfo model_info() {
  kiln::ModelInfo m{};
  m.name = "fuzz";
  m.family = "qwen3";
  m.source = "fuzz";
  m.vocab_size = 512;
  m.max_context = 512;
  m.chat_template = "chatml";
  m.chat_default_system = "";
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kiln::ModelInfo model = model_info();
  static const kiln::ModelSetup setup = model_setup();
  kiln::CliOptions options;
  options.prompts_file = kiln::fuzz::write_input("requests.jsonl", kiln::fuzz::as_text(data, size));
  options.seed = 7;
  options.chat_special_tokens = size % 2 == 1;
  kiln::fuzz::expect_kiln_errors_only([&] {
    for (const kiln::PromptJob& job : kiln::build_jobs(options, model, setup, kiln::SamplingParams{})) {
      if (!job.error.empty()) continue;
      // A job that parsed is a request the scheduler can take: ids in the vocabulary, valid params.
      for (int32_t id : job.request.prompt) {
        if (id < 0 || id >= model.vocab_size) __builtin_trap();
      }
      job.request.params.validate();
    }
  });
  return 0;
}
