#include "runtime/server/http_server.hpp"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <cstring>
#include <deque>

#include "runtime/chat/chat_encode.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/strict_json.hpp"

// cpp-httplib, header-only (third_party/cpp-httplib/README.md says why not Debian's shared build).
// A burst of clients connecting at once must not overflow the accept queue (Debian's build: 5).
#define CPPHTTPLIB_LISTEN_BACKLOG 1024
#include "third_party/cpp-httplib/httplib.h"

namespace kiln {

using nlohmann::json;

namespace {

const char* kVersion = "kiln " KILN_VERSION;

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = "") {
  if (status == 503) res.set_header("Retry-After", "1");
  send_json(res, status, error_body(status, message, param));
}

// Strict, as every foreign JSON kiln reads: a repeated key, a number out of range or nesting
// deeper than kJsonMaxDepth is a 400, not a silent choice.
json parse_body(const httplib::Request& req) {
  try {
    return parse_json_strict(req.body, "the request body");
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
}

// The socket of the connection a request came on. cpp-httplib 0.11 tells a streaming handler
// neither the socket nor that the client went away until a write fails (which, after a close,
// only the second write does), so the handler finds its socket once by the peer's address and
// polls it for the client's hang-up while it waits for tokens. -1 when not found.
int find_client_socket(const httplib::Request& req) {
  for (int fd = 3; fd < 65536; ++fd) {
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) {
      if (errno == EBADF && fd > 4096) break;  // past the open descriptors (with slack for gaps)
      continue;
    }
    char host[INET6_ADDRSTRLEN] = {};
    int port = -1;
    if (peer.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&peer);
      inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      port = ntohs(a->sin_port);
    } else if (peer.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&peer);
      inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      port = ntohs(a->sin6_port);
    }
    if (port == req.remote_port && req.remote_addr == host) return fd;
  }
  return -1;
}

// Whether the client closed its end (or the connection broke), given poll()'s revents for it.
bool hung_up(int fd, short revents) {
  if (revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
  char byte;
  return (revents & POLLIN) && recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

// Deltas of one HTTP request's choices, from the engine loop's thread to the handler's. The
// handler sleeps in poll() on an eventfd the loop signals and on the client's socket, so it wakes
// for new deltas or for the client's hang-up, and for nothing else.
class Channel {
 public:
  struct Item {
    int32_t choice;
    OutputDelta delta;
    RequestSummary summary;
  };

  Channel() : event_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (event_ < 0) fail("eventfd: ", std::strerror(errno));
  }
  ~Channel() { close(event_); }
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  void push(int32_t choice, const OutputDelta& delta, const RequestSummary& summary) {
    {
      std::lock_guard lock(mutex_);
      items_.push_back(Item{choice, delta, summary});
    }
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = write(event_, &one, sizeof one);  // only fails when the counter is full
  }

  // Waits until deltas arrive or the client (socket, -1: not watched) hangs up; returns the
  // deltas (maybe none) and sets `gone` on a hang-up.
  std::deque<Item> wait(int socket, bool& gone) {
    pollfd fds[2] = {{event_, POLLIN, 0}, {socket, POLLIN | POLLRDHUP, 0}};
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (!items_.empty()) break;
      }
      const int ready = poll(fds, socket >= 0 ? 2 : 1, 1000);
      if (ready > 0 && socket >= 0 && fds[1].revents && hung_up(socket, fds[1].revents)) {
        gone = true;
        break;
      }
      if (ready > 0 && socket >= 0 && (fds[1].revents & POLLIN)) fds[1].events = POLLRDHUP;  // pipelined bytes: stop polling them
      if (ready > 0 && (fds[0].revents & POLLIN)) break;
    }
    uint64_t count;
    [[maybe_unused]] const ssize_t n = read(event_, &count, sizeof count);  // reset (EAGAIN when already 0)
    std::lock_guard lock(mutex_);
    std::deque<Item> out;
    out.swap(items_);
    return out;
  }

 private:
  int event_;
  std::mutex mutex_;
  std::deque<Item> items_;
};

// Whether the Authorization header carries the key, looking at every byte whatever the first
// difference, so that how long a 401 takes says nothing of how much of a guessed key was right.
bool authorized(std::string_view header, const std::string& api_key) {
  const std::string expected = "Bearer " + api_key;
  unsigned diff = header.size() != expected.size() ? 1u : 0u;
  for (size_t i = 0; i < header.size(); ++i) diff |= static_cast<unsigned char>(header[i] ^ expected[i % expected.size()]);
  return diff == 0;
}

// One HTTP generation request: its engine requests (prompts × n) and their accumulated results.
struct Generation {
  ApiRequest request;
  const ApiModel* model;
  EngineLoop* loop;
  std::shared_ptr<Channel> channel = std::make_shared<Channel>();
  std::vector<RequestId> ids;          // per choice
  std::vector<ChoiceText> choices;     // per choice (non-streaming: accumulated)
  std::vector<bool> finished, started;
  Usage usage;
  int32_t num_finished = 0;
  ResponseBuilder builder;

  Generation(ApiRequest r, const ApiModel* m, EngineLoop* l)
      : request(std::move(r)), model(m), loop(l), builder(request, *m) {}

  int32_t num_choices() const { return static_cast<int32_t>(request.prompts.size()) * request.n; }

  // A whole (not streamed) answer computes a prompt's prompt_logprobs in its first choice alone and
  // gives them to the other n - 1 at the end (share_prompt_logprobs), which would compute the same,
  // a row of logits per prompt token each (and skip the prefix cache for it). Streamed, a choice's
  // first chunk carries them, which may come before the first choice has them: each computes its own.
  bool shares_prompt_logprobs() const { return !request.stream && request.params.prompt_logprobs.has_value(); }
  void share_prompt_logprobs() {
    if (!shares_prompt_logprobs()) return;
    for (size_t c = 0; c < choices.size(); ++c) {
      if (c % request.n != 0) choices[c].prompt_logprobs = choices[c - c % request.n].prompt_logprobs;
    }
  }

  // Submits every choice; on a refusal, withdraws the ones already submitted and rethrows.
  void submit() {
    const int32_t n = num_choices();
    choices.resize(n);
    finished.assign(n, false);
    started.assign(n, false);
    for (int32_t c = 0; c < n; ++c) {
      choices[c].index = c;
      Request r;
      r.prompt = request.prompts[c / request.n];
      r.params = request.params;
      if (shares_prompt_logprobs() && c % request.n != 0) r.params.prompt_logprobs.reset();
      if (r.params.seed) r.params.seed = *r.params.seed + static_cast<uint64_t>(c % request.n);
      std::weak_ptr<Channel> weak = channel;
      try {
        ids.push_back(loop->submit(std::move(r), [weak, c](const OutputDelta& d, const RequestSummary& s) {
          if (auto ch = weak.lock()) ch->push(c, d, s);
        }));
      } catch (...) {
        abort_all();
        throw;
      }
    }
  }
  void abort_all() {
    for (size_t c = 0; c < ids.size(); ++c) {
      if (!finished[c]) loop->abort(ids[c]);
    }
  }
  bool done() const { return num_finished == num_choices(); }

  // Folds one delta into the choice; returns the delta as a ChoiceText for streaming.
  ChoiceText apply(const Channel::Item& item) {
    ChoiceText d;
    d.index = item.choice;
    d.text = item.delta.text;
    if (request.echo && !started[item.choice]) {
      d.text = request.prompt_texts[item.choice / request.n] + d.text;
    }
    started[item.choice] = true;
    d.token_ids = item.delta.token_ids;
    d.logprobs = item.delta.logprobs;
    d.top_logprobs = item.delta.top_logprobs;
    d.prompt_logprobs = item.delta.prompt_logprobs;
    if (item.delta.finished) {
      d.finish_reason = openai_finish_reason(item.delta.reason);
      if (item.delta.reason == FinishReason::StopString) d.stop_reason = item.delta.stop_string;
      if (item.delta.reason == FinishReason::StopToken && !is_end_of_turn(item.delta.stop_token)) {
        d.stop_reason = item.delta.stop_token;
      }
      finished[item.choice] = true;
      ++num_finished;
      usage.prompt_tokens += item.summary.prompt_tokens;
      usage.cached_tokens += item.summary.cached_prompt_tokens;
      usage.completion_tokens += item.summary.completion_tokens;
    }
    ChoiceText& acc = choices[item.choice];
    acc.text += d.text;
    acc.token_ids.insert(acc.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
    acc.logprobs.insert(acc.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    acc.top_logprobs.insert(acc.top_logprobs.end(), d.top_logprobs.begin(), d.top_logprobs.end());
    if (!d.prompt_logprobs.empty()) acc.prompt_logprobs = d.prompt_logprobs;
    if (d.finish_reason) {
      acc.finish_reason = d.finish_reason;
      acc.stop_reason = d.stop_reason;
    }
    return d;
  }
  // The chat template's end-of-turn tokens end a turn like EOS: no stop_reason (vLLM).
  bool is_end_of_turn(int32_t token) const {
    return std::find(model->chat_stop_ids.begin(), model->chat_stop_ids.end(), token) != model->chat_stop_ids.end();
  }
};

}  // namespace

struct HttpServer::Inflight {
  HttpServer& server;
  explicit Inflight(HttpServer& s) : server(s) {
    std::lock_guard lock(server.inflight_mutex_);
    ++server.inflight_;
  }
  ~Inflight() {
    std::lock_guard lock(server.inflight_mutex_);
    if (--server.inflight_ == 0) server.inflight_done_.notify_all();
  }
};

HttpServer::HttpServer(HttpOptions options, ServerMetrics& metrics)
    : options_(std::move(options)), metrics_(metrics), server_(std::make_unique<httplib::Server>()) {
  const int threads = options_.threads > 0 ? options_.threads : 64;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  server_->set_payload_max_length(options_.max_request_bytes);
  server_->set_keep_alive_max_count(1000);
  server_->set_keep_alive_timeout(5);
  server_->set_tcp_nodelay(true);  // stream chunks go out at once
  routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  const int port = options_.port == 0 ? server_->bind_to_any_port(options_.host)
                                      : (server_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port < 0) fail("cannot listen on ", options_.host, ":", options_.port, " (address in use, or not this machine's)");
  return port;
}

void HttpServer::listen() { server_->listen_after_bind(); }

void HttpServer::set_ready(const ApiModel* model, EngineLoop* loop) {
  loop_.store(loop);
  model_.store(model);
}

void HttpServer::drain() {
  draining_.store(true);
  std::unique_lock lock(inflight_mutex_);
  inflight_done_.wait(lock, [&] { return inflight_ == 0; });
}

void HttpServer::stop() { server_->stop(); }

void HttpServer::routes() {
  httplib::Server& s = *server_;

  // API key on /v1/* (as vLLM: /health, /metrics, /tokenize... stay open), and every reply's
  // error in OpenAI's shape.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    if (!authorized(req.get_header_value("Authorization"), options_.api_key)) {
      send_json(res, 401, error_body(401, "invalid or missing API key: send 'Authorization: Bearer <key>'"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) {
      send_error(res, 413, "the request body is larger than the server's limit (--max-request-bytes)");
    } else if (res.status == 404) {
      send_error(res, 404, "no route " + req.method + " " + req.path);
    } else {
      send_error(res, res.status, std::string("HTTP error ") + std::to_string(res.status));
    }
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      send_error(res, 500, std::string("internal error: ") + e.what());
    } catch (...) {
      send_error(res, 500, "internal error");
    }
  });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (model_.load() == nullptr) {
      send_error(res, 503, "the model is loading");
    } else {
      res.status = 200;
    }
  });
  s.Get("/version", [](const httplib::Request&, httplib::Response& res) { send_json(res, 200, {{"version", kVersion}}); });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.text(), "text/plain; version=0.0.4; charset=utf-8");
  });

  // Wraps a handler that needs the loaded model: 503 while loading, ApiError -> its status.
  const auto with_model = [this](auto handler) {
    return [this, handler](const httplib::Request& req, httplib::Response& res) {
      const ApiModel* model = model_.load();
      if (model == nullptr) return send_error(res, 503, "the model is loading");
      try {
        handler(req, res, *model);
      } catch (const ApiError& e) {
        send_json(res, e.status, error_body(e.status, e.what(), e.param));
      } catch (const Overloaded& e) {
        send_error(res, 503, e.what());
      } catch (const Error& e) {
        send_error(res, 400, e.what());
      }
    };
  };

  s.Get("/v1/models", with_model([](const httplib::Request&, httplib::Response& res, const ApiModel& m) {
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    send_json(res, 200, {{"object", "list"},
                         {"data", json::array({{{"id", m.name}, {"object", "model"}, {"created", now}, {"owned_by", "kiln"},
                                                {"root", m.name}, {"max_model_len", m.max_model_len}}})}});
  }));

  s.Post("/tokenize", with_model([](const httplib::Request& req, httplib::Response& res, const ApiModel& m) {
    const json body = parse_body(req);
    if (!m.tokenizer) throw ApiError(400, "this server has no tokenizer");
    std::vector<int32_t> ids;
    if (body.contains("messages")) {
      if (!m.chat_template) throw ApiError(400, "this model has no chat template", "messages");
      try {
        ids = encode_chat(*m.tokenizer, *m.chat_template, body["messages"], body.value("add_generation_prompt", true),
                          body.value("chat_template_kwargs", json::object()), m.special_tokens_in_text)
                  .ids;
      } catch (const Error& e) {
        throw ApiError(400, e.what(), "messages");
      }
    } else if (body.contains("prompt") && body["prompt"].is_string()) {
      const bool special = body.value("add_special_tokens", true);
      ids = m.tokenizer->encode(body["prompt"].get<std::string>(), special && m.tokenizer->add_bos_by_default());
    } else {
      throw ApiError(400, "give 'prompt' (a string) or 'messages'", "prompt");
    }
    send_json(res, 200, {{"count", ids.size()}, {"max_model_len", m.max_model_len}, {"tokens", ids}});
  }));
  s.Post("/detokenize", with_model([](const httplib::Request& req, httplib::Response& res, const ApiModel& m) {
    const json body = parse_body(req);
    if (!m.tokenizer) throw ApiError(400, "this server has no tokenizer");
    if (!body.contains("tokens") || !body["tokens"].is_array()) throw ApiError(400, "'tokens' must be a list of token ids", "tokens");
    std::vector<int32_t> ids;
    for (const json& t : body["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= m.vocab_size) {
        throw ApiError(400, "'tokens' holds " + t.dump() + ", not a token id in [0, " + std::to_string(m.vocab_size) + ")", "tokens");
      }
      ids.push_back(t.get<int32_t>());
    }
    send_json(res, 200, {{"prompt", m.tokenizer->decode(ids)}});
  }));

  const auto generate = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res, const ApiModel& m) {
      if (draining_.load()) throw Overloaded("the server is shutting down");
      auto inflight = std::make_shared<Inflight>(*this);
      const json body = parse_body(req);
      auto gen = std::make_shared<Generation>(
          chat ? parse_chat_request(body, m, req.body) : parse_completion_request(body, m, req.body), &m, loop_.load());
      gen->submit();  // throws Overloaded (503) or the engine's refusal (400)

      const int socket = find_client_socket(req);
      if (!gen->request.stream) {
        while (!gen->done()) {
          bool gone = false;
          for (const Channel::Item& item : gen->channel->wait(socket, gone)) gen->apply(item);
          if (gone && !gen->done()) {
            gen->abort_all();  // nobody is waiting for the answer: free its pages now
            return;
          }
        }
        gen->share_prompt_logprobs();
        send_json(res, 200, gen->builder.response(gen->choices, gen->usage));
        return;
      }

      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [gen, chat, socket](size_t, httplib::DataSink& sink) {
            if (!gen->done()) {
              // A client that went away is noticed at once: its request is aborted (the
              // releaser below) and its pages freed before the next step.
              bool gone = false;
              std::string out;
              for (const Channel::Item& item : gen->channel->wait(socket, gone)) {
                if (chat && !gen->started[item.choice]) out += gen->builder.role_chunk(item.choice);
                const ChoiceText d = gen->apply(item);
                if (!d.text.empty() || d.finish_reason || !d.token_ids.empty() || !d.prompt_logprobs.empty()) {
                  out += gen->builder.chunk(d);
                }
              }
              if (gone) return false;
              if (!out.empty() && !sink.write(out.data(), out.size())) return false;
              if (!gen->done()) return true;
            }
            std::string tail;
            if (gen->request.include_usage) tail += gen->builder.usage_chunk(gen->usage);
            tail += "data: [DONE]\n\n";
            if (!sink.write(tail.data(), tail.size())) return false;
            sink.done();
            return true;
          },
          [gen, inflight](bool success) {
            // The client went away (or the write failed): withdraw what still runs, free its pages.
            if (!success || !gen->done()) gen->abort_all();
          });
    };
  };
  s.Post("/v1/completions", with_model(generate(false)));
  s.Post("/v1/chat/completions", with_model(generate(true)));
}

}  // namespace kiln
