#include "runtime/cli/serve.hpp"

#include <pthread.h>

#include <csignal>
#include <iostream>
#include <thread>

#include "runtime/cli/model_setup.hpp"
#include "runtime/core/error.hpp"
#include "runtime/server/engine_loop.hpp"
#include "runtime/server/http_server.hpp"

namespace kiln {

int run_serve(const ModelDef& model, const CliOptions& o) {
  const ModelInfo& m = model.info;
  // SIGTERM and SIGINT are taken by sigwait() below: blocked here, before any thread starts, so
  // every thread inherits the mask. A client that goes away must not kill us with SIGPIPE.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  const std::string name = o.served_model_name.empty() ? m.name : o.served_model_name;
  ServerMetrics metrics(name);
  HttpOptions http;
  http.host = o.host;
  http.port = o.port;
  http.api_key = o.api_key;
  http.max_request_bytes = o.max_request_bytes;
  const int32_t max_seqs = o.max_batch > 0 ? o.max_batch : m.max_batch;
  // One worker per connection that may be open at once: streams hold theirs while they run.
  http.threads = o.http_threads > 0 ? o.http_threads : max_seqs + o.max_waiting + 64;
  HttpServer server(http, metrics);
  const int port = server.bind();
  std::thread listener([&] { server.listen(); });
  std::cerr << "kiln: " << version_line(m) << "\nkiln: listening on http://" << o.host << ":" << port
            << " (loading the model; /health says 503 until it is ready)" << std::endl;

  int code = 0;
  std::unique_ptr<ModelSetup> setup;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<EngineLoop> loop;
  ApiModel api;
  std::unique_ptr<ToolCallParser> tool_parser;
  std::unique_ptr<ReasoningParser> reasoning_parser;
  try {
    setup = std::make_unique<ModelSetup>(open_model(model, o));
    load_backend(*setup, model, o);
    engine = std::make_unique<Engine>(model, *setup->backend, engine_options(o));
    loop = std::make_unique<EngineLoop>(*engine, setup->tokenizer ? &*setup->tokenizer : nullptr, &metrics,
                                        EngineLoopOptions{o.max_waiting});
    api.name = name;
    api.tokenizer = setup->tokenizer ? &*setup->tokenizer : nullptr;
    api.chat_template = setup->chat_template ? &*setup->chat_template : nullptr;
    api.chat_stop_ids = setup->chat_stop_ids;
    api.max_model_len = engine->scheduler().context_limit();
    api.vocab_size = m.vocab_size;
    api.defaults = setup->defaults;
    api.special_tokens_in_text = o.chat_special_tokens;
    api.max_choices = o.max_waiting;
    api.structured = setup->structured.get();
    if (!o.tool_call_parser.empty()) tool_parser = ToolCallParser::make(o.tool_call_parser);
    api.tool_parser = tool_parser.get();
    if (!o.reasoning_parser.empty()) {
      reasoning_parser = ReasoningParser::make(o.reasoning_parser);
      if (api.tokenizer) {
        api.think_tokens = ThinkTokens{api.tokenizer->token_id("<think>"), api.tokenizer->token_id("</think>")};
      }
      if (!api.think_tokens.found()) {
        std::cerr << "kiln: --reasoning-parser " << o.reasoning_parser << ": the vocabulary has no single <think> and "
                  << "</think> tokens; structured output will constrain the reasoning too" << std::endl;
      }
    }
    api.reasoning_parser = reasoning_parser.get();
    server.set_ready(&api, loop.get());
    std::cerr << "kiln: ready: " << name << " on " << setup->backend->name() << " (" << setup->backend->info().device
              << "), max model len " << api.max_model_len << ", max " << engine->scheduler().config().max_num_seqs
              << " sequences, " << setup->backend->kv_pages() << " KV pages of " << m.page_size << " tokens"
              << (api.chat_template ? ", chat template: " + api.chat_template->origin() : ", no chat template") << std::endl;

    int signal = 0;
    sigwait(&signals, &signal);
    std::cerr << "kiln: " << (signal == SIGTERM ? "SIGTERM" : "SIGINT")
              << ": no new requests; finishing the ones in flight" << std::endl;
    server.drain();  // new generation requests get 503; waits until every response is written
    loop->drain();
  } catch (const Error& e) {
    std::cerr << m.name << ": error: " << e.what() << "\n";
    code = 1;
  }
  server.stop();
  listener.join();
  loop.reset();
  if (code == 0) std::cerr << "kiln: stopped" << std::endl;
  return code;
}

}  // namespace kiln
