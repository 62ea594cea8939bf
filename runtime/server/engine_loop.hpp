// The live engine: one thread owns the Engine and steps it while anything is unfinished; other
// threads (HTTP handlers, the chat REPL) submit requests and abort them at any time. New requests
// join the running batch at the next step (continuous batching across clients); an abort frees the
// request's KV pages before the next step. Each request's tokens go through its OutputProcessor on
// the loop thread (so a stop string ends the request before another token is computed) and its
// deltas to the submitter's sink.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/engine/engine.hpp"
#include "runtime/server/metrics.hpp"
#include "runtime/server/output_processor.hpp"

namespace kiln {

// Thrown by submit() when the waiting queue is full (the server answers 503 with Retry-After) or
// the loop is draining (shutting down).
class Overloaded : public Error {
 public:
  using Error::Error;
};

struct EngineLoopOptions {
  int32_t max_waiting = 1024;  // requests waiting for a batch slot at most; more are refused
};

// A finished request's accounting, sent with its last delta.
struct RequestSummary {
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0;
  int32_t completion_tokens = 0;
};

class EngineLoop {
 public:
  // Called on the loop thread for each delta, in order; the last one has finished set (and the
  // summary is filled then). Must not block: hand the delta over to the consumer and return.
  using Sink = std::function<void(const OutputDelta& delta, const RequestSummary& summary)>;

  EngineLoop(Engine& engine, const Tokenizer* tokenizer, ServerMetrics* metrics, EngineLoopOptions options = {});
  ~EngineLoop();  // aborts what is left and joins the thread
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Thread-safe. Hands the request to the engine (the loop picks its id) and returns the id once
  // the engine has it. Throws Overloaded (queue full, or draining) or kiln::Error with the engine's
  // reason (prompt too long, bad parameters, ...). The sink is never called for a refused request.
  RequestId submit(Request request, Sink sink);
  // Thread-safe. The request finishes (Aborted) before the next step; its sink gets no more deltas.
  void abort(RequestId id);
  // Refuse new requests from now on; returns when every accepted request has finished.
  void drain();

  int32_t num_unfinished() const { return unfinished_.load(); }

 private:
  struct Pending {
    Request request;
    Sink sink;
    std::promise<RequestId> accepted;
  };
  struct Active {
    OutputProcessor output;
    Sink sink;
    std::chrono::steady_clock::time_point arrival, last_token;
    bool has_token = false;
    std::optional<OutputDelta> final_delta;  // held until the engine reports the request finished
  };

  void run();
  void admit(std::deque<Pending>& pending);
  void on_token(const TokenEvent& event, std::vector<RequestId>& stopped);
  void finish_requests();
  void publish_gauges();

  Engine& engine_;
  const Tokenizer* tokenizer_;
  ServerMetrics* metrics_;
  EngineLoopOptions options_;

  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<Pending> pending_;
  std::vector<RequestId> aborts_;
  bool stopping_ = false, draining_ = false;
  std::atomic<int32_t> waiting_{0};     // the scheduler's waiting queue, as of the last step
  std::atomic<int32_t> unfinished_{0};  // accepted and not finished (pending included)

  // Loop thread only.
  std::unordered_map<RequestId, Active> active_;
  RequestId next_id_ = 1;
  std::thread thread_;
};

}  // namespace kiln
