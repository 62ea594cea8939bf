// The OpenAI-compatible HTTP server (cpp-httplib 0.11.4, third_party/cpp-httplib): /v1/completions,
// /v1/chat/completions (Server-Sent Events when streaming), /v1/models, /health, /metrics,
// /tokenize, /detokenize, /version. It listens before the model is loaded (/health answers 503
// until set_ready()), checks the API key on /v1/*, refuses bodies over the size limit (413), and
// aborts a streaming request whose client went away.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/server/engine_loop.hpp"
#include "runtime/server/metrics.hpp"
#include "runtime/server/openai_api.hpp"

namespace httplib {
class Server;
}

namespace kiln {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                       // 0: any free port (see bind())
  std::string api_key;                   // non-empty: /v1/* need "Authorization: Bearer <key>"
  size_t max_request_bytes = 8u << 20;   // larger bodies get 413
  int threads = 0;                       // HTTP worker threads (0: enough for every request the engine may hold)
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, ServerMetrics& metrics);
  ~HttpServer();

  // Binds the socket; returns the port (useful with port 0). Throws kiln::Error when it cannot.
  int bind();
  // Serves until stop(); call from a thread of its own.
  void listen();
  // The model is loaded: generation endpoints open, /health says 200.
  void set_ready(const ApiModel* model, EngineLoop* loop);
  // Refuses new generation requests (503) from now on; returns when the ones in flight are answered.
  void drain();
  void stop();

 private:
  void routes();
  struct Inflight;

  HttpOptions options_;
  ServerMetrics& metrics_;
  std::unique_ptr<httplib::Server> server_;
  std::atomic<const ApiModel*> model_{nullptr};
  std::atomic<EngineLoop*> loop_{nullptr};
  std::atomic<bool> draining_{false};
  std::mutex inflight_mutex_;
  std::condition_variable inflight_done_;
  int inflight_ = 0;  // generation requests not fully answered
};

}  // namespace kiln
