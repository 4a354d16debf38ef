// `prism serve`'s HTTP side: OpenAI's /v1/completions, /v1/chat/completions, /v1/embeddings and /v1/models,
// /health and /metrics, on cpp-httplib, with API keys, CORS, limits, streaming as server-sent events, and a
// drain.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "server/engine.h"
#include "server/metrics.h"
#include "server/model_pool.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace prism {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;              // "": no key needed
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  int threads = 64;                 // connections served at once (most wait on the engine)
};

class HttpServer {
 public:
  // `load` makes a model's engine. The pool's first model loads in the background while /health answers
  // 503; the others load when first asked for.
  HttpServer(ServeOptions opts, std::vector<ModelSpec> models, PoolOptions pool,
             std::function<std::unique_ptr<Engine>(const ModelSpec&, Metrics*)> load);
  ~HttpServer();
  // Listens until Stop; returns false (with *why) when the address cannot be bound or the model not loaded.
  bool Listen(std::string* why);
  int port() const { return port_; }  // the bound port (ServeOptions::port 0 picks a free one)
  // Called once the port is bound, before requests are served (the model may still be loading).
  void OnListening(std::function<void(int port)> f) { on_listening_ = std::move(f); }
  // Refuses new requests (503), lets the accepted ones finish, then stops listening.
  void Drain();

 private:
  void Routes();
  void Generate(const httplib::Request& req, httplib::Response& res, bool chat);
  void Embeddings(const httplib::Request& req, httplib::Response& res);
  ServeOptions opts_;
  Metrics metrics_;
  std::unique_ptr<httplib::Server> http_;
  ModelPool pool_;
  std::atomic<bool> ready_{false}, draining_{false};
  std::atomic<int> streams_{0};  // event streams not yet fully written (Drain waits for them)
  std::thread loader_;
  std::mutex load_mu_;
  std::string load_error_;
  std::function<void(int)> on_listening_;
  int port_ = 0;
  int listen_socket_ = -1;  // the bound socket (its backlog raised after httplib's bind)
};

}  // namespace prism
