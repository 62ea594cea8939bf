#include "runtime/cli/chat_repl.hpp"

#include <unistd.h>

#include <csignal>
#include <iostream>
#include <string>

#include "runtime/chat/chat_encode.hpp"
#include "runtime/cli/model_setup.hpp"
#include "runtime/core/error.hpp"
#include "runtime/server/output_processor.hpp"

namespace kiln {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_interrupt(int) { g_interrupted = 1; }

}  // namespace

int run_chat(const ModelDef& model, const CliOptions& o) {
  const ModelInfo& m = model.info;
  ModelSetup setup = open_model(model, o);
  if (!setup.tokenizer) fail("chat needs a tokenizer: give -m with a tokenizer.json, a .gguf, or --tokenizer");
  if (!setup.chat_template) fail(m.name, " has no chat template (none in the tokenizer files, config chat_template: none)");
  const Tokenizer& tokenizer = *setup.tokenizer;
  load_backend(setup, model, o);
  Engine engine(model, *setup.backend, engine_options(o));
  SamplingParams params = default_params(o, setup);
  for (int32_t id : setup.chat_stop_ids) params.stop_token_ids.push_back(id);

  const bool interactive = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
  if (interactive) {
    std::signal(SIGINT, on_interrupt);
    std::cerr << m.name << " chat on " << setup.backend->name() << ". /clear starts over, /exit quits, Ctrl-C stops an answer.\n";
  }
  nlohmann::json messages = nlohmann::json::array();
  const auto reset = [&] {
    messages = nlohmann::json::array();
    if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
  };
  reset();

  RequestId next_id = 1;
  uint64_t turn = 0;
  int64_t turns = 0, prompt_tokens = 0, cached_tokens = 0;
  std::string line;
  for (;;) {
    if (interactive) std::cout << "> " << std::flush;
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/clear") {
      reset();
      turn = 0;  // with --seed, a conversation started over replays the same answers
      if (interactive) std::cerr << "(conversation cleared)\n";
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;

    messages.push_back({{"role", "user"}, {"content", line}});
    Request request;
    request.id = next_id++;
    request.prompt = encode_chat(tokenizer, *setup.chat_template, messages, /*add_generation_prompt=*/true,
                                 nlohmann::json::object(), o.chat_special_tokens)
                         .ids;
    request.params = params;
    if (o.seed) request.params.seed = *o.seed + turn;
    ++turn;
    const int64_t room = engine.scheduler().context_limit() - static_cast<int64_t>(request.prompt.size());
    if (room < 1) {
      std::cerr << "kiln: the conversation has " << request.prompt.size() << " tokens, the context limit is "
                << engine.scheduler().context_limit() << ": /clear to start over\n";
      messages.erase(messages.end() - 1);
      continue;
    }
    request.params.max_tokens = static_cast<int32_t>(std::min<int64_t>(request.params.max_tokens, room));
    request.params.min_tokens = std::min(request.params.min_tokens, request.params.max_tokens);
    OutputProcessor output(&tokenizer, request.params);
    engine.add(request);
    g_interrupted = 0;
    bool stop_string = false;
    while (engine.has_unfinished()) {
      if (g_interrupted) {
        engine.abort(request.id, FinishReason::Aborted);
        break;
      }
      engine.step([&](const TokenEvent& e) {
        const OutputDelta d = output.push(e);
        std::cout << d.text << std::flush;
        stop_string = stop_string || (d.finished && !e.finished);
      });
      if (stop_string) engine.abort(request.id, FinishReason::StopString);
    }
    std::cout << std::endl;
    for (const FinishedRequest& f : engine.take_finished()) {
      prompt_tokens += f.num_prompt_tokens;
      cached_tokens += f.num_cached_prompt_tokens;
      ++turns;
      if (interactive && f.num_cached_prompt_tokens > 0) {
        std::cerr << "(" << f.num_cached_prompt_tokens << " of " << f.num_prompt_tokens
                  << " prompt tokens from the prefix cache)\n";
      }
    }
    messages.push_back({{"role", "assistant"}, {"content", output.text()}});
  }
  std::cerr << "kiln: " << turns << " turns, " << cached_tokens << " of " << prompt_tokens
            << " prompt tokens from the prefix cache\n";
  return 0;
}

}  // namespace kiln
