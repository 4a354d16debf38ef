// `prism serve`'s HTTP side: OpenAI's generation and embedding endpoints, models, health and metrics on
// cpp-httplib.
#include "server/http_server.h"

#include <httplib.h>

#include <atomic>
#include <bit>
#include <ctime>
#include <random>

#include <sys/socket.h>

#include "server/api_error.h"
#include "server/chat_page.h"

namespace prism {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

std::string NewId(const char* prefix) {
  static std::atomic<uint64_t> counter{std::random_device{}()};
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)(counter++ * 0x9E3779B97F4A7C15ull));
  return prefix + std::string(buf);
}

void SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(e.ToJson().dump(), "application/json");
}

std::string TokenString(const Tokenizer& tok, int32_t id) { return tok.Decode({id}, false); }

json Bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back((int)c);
  return b;
}

// Logprobs as the two APIs spell them: chat's {"content": [...]}, completions' parallel arrays.
json ChatLogprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps) {
  json content = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string t = TokenString(tok, lp.id);
    json top = json::array();
    for (const auto& [id, v] : lp.top) {
      const std::string s = TokenString(tok, id);
      top.push_back({{"token", s}, {"logprob", v}, {"bytes", Bytes(s)}});
    }
    content.push_back({{"token", t}, {"logprob", lp.logprob}, {"bytes", Bytes(t)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json CompletionLogprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps, size_t* offset) {
  json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string t = TokenString(tok, lp.id);
    tokens.push_back(t);
    values.push_back(lp.logprob);
    json top = json::object();
    for (const auto& [id, v] : lp.top) top[TokenString(tok, id)] = v;
    tops.push_back(top);
    offsets.push_back(*offset);
    *offset += t.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json Usage(const Job& job) {
  const int completion = job.completion_tokens;
  return {{"prompt_tokens", job.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", job.prompt_tokens + completion}};
}

// What one response is building: its identity and, per choice, what has been said.
struct Response {
  ServeRequest request;
  std::shared_ptr<Engine> engine;
  std::shared_ptr<Job> job;
  std::string id, model;
  int64_t created = 0;
  std::vector<std::string> text, finish;
  std::vector<std::vector<TokenLogprob>> logprobs;
  std::vector<size_t> offsets;  // completions' text_offset so far, per choice
  std::vector<bool> role_sent;  // chat streams open each choice with the assistant's role
  json Head(const char* object) const {
    return {{"id", id}, {"object", object}, {"created", created}, {"model", model}};
  }
};

// One streamed chunk for an event.
json Chunk(Response& st, const Tokenizer& tok, const ChoiceEvent& ev) {
  const bool chat = st.request.chat;
  json choice{{"index", ev.index},
              {"finish_reason", ev.finish_reason.empty() ? json(nullptr) : json(ev.finish_reason)}};
  json lp = nullptr;
  if (st.request.logprobs >= 0 && !ev.logprobs.empty())
    lp = chat ? ChatLogprobs(tok, ev.logprobs) : CompletionLogprobs(tok, ev.logprobs, &st.offsets[ev.index]);
  choice["logprobs"] = lp;
  if (chat) {
    json delta = json::object();
    if (!st.role_sent[ev.index]) delta["role"] = "assistant";
    st.role_sent[ev.index] = true;
    if (!ev.text.empty()) delta["content"] = ev.text;
    choice["delta"] = delta;
  } else {
    choice["text"] = ev.text;
  }
  json chunk = st.Head(chat ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = json::array({choice});
  return chunk;
}

// The whole response, once every choice has finished.
json Whole(const Response& st, const Tokenizer& tok) {
  const bool chat = st.request.chat;
  json choices = json::array();
  for (size_t i = 0; i < st.text.size(); ++i) {
    json c{{"index", i}, {"finish_reason", st.finish[i]}};
    if (st.request.logprobs < 0) {
      c["logprobs"] = nullptr;
    } else if (chat) {
      c["logprobs"] = ChatLogprobs(tok, st.logprobs[i]);
    } else {
      size_t offset = 0;
      c["logprobs"] = CompletionLogprobs(tok, st.logprobs[i], &offset);
    }
    if (chat)
      c["message"] = {{"role", "assistant"}, {"content", st.text[i]}};
    else
      c["text"] = st.text[i];
    choices.push_back(c);
  }
  json out = st.Head(chat ? "chat.completion" : "text_completion");
  out["choices"] = choices;
  out["usage"] = Usage(*st.job);
  return out;
}

// Runs a route's work: an ApiError becomes its status and OpenAI's error JSON, anything else a 500; counted.
template <class Work>
void Answer(Metrics& metrics, httplib::Response& res, Work&& work) {
  try {
    work();
  } catch (const ApiError& e) {
    SendError(res, e);
    metrics.Request(e.status);
  } catch (const std::exception& e) {
    SendError(res, ApiError(500, "server_error", e.what()));
    metrics.Request(500);
  }
}

// An embedding as encoding_format "base64" sends it: its float32 bytes, little-endian, in base64.
std::string Base64Floats(const std::vector<float>& v) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  static_assert(std::endian::native == std::endian::little, "float bytes are sent little-endian");
  const auto* b = reinterpret_cast<const uint8_t*>(v.data());
  const size_t n = v.size() * sizeof(float);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t w =
        (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
    out += kAlphabet[w >> 18];
    out += kAlphabet[(w >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(w >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[w & 63] : '=';
  }
  return out;
}

}  // namespace

HttpServer::HttpServer(ServeOptions opts, std::vector<ModelSpec> models, PoolOptions pool,
                       std::function<std::unique_ptr<Engine>(const ModelSpec&, Metrics*)> load)
    : opts_(std::move(opts)),
      http_(std::make_unique<httplib::Server>()),
      pool_(std::move(models), pool,
            [this, load = std::move(load)](const ModelSpec& m) { return load(m, &metrics_); }) {
  Routes();
}

HttpServer::~HttpServer() {
  if (http_->is_running()) http_->stop();
  if (loader_.joinable()) loader_.join();
}

bool HttpServer::Listen(std::string* why) {
  port_ = opts_.port == 0 ? http_->bind_to_any_port(opts_.host)
                          : (http_->bind_to_port(opts_.host, opts_.port) ? opts_.port : -1);
  if (port_ < 0) {
    *why = "cannot listen on " + opts_.host + ":" + std::to_string(opts_.port);
    return false;
  }
  // Debian's cpp-httplib listens with a backlog of 5, compiled into its library: 16 clients connecting at
  // once while the engine held both cores overflowed it, and the dropped connections' SYNs were resent a
  // second later (their first token 1.1 s late) or their requests were reset. Listening again on the
  // bound socket only raises its backlog.
  if (listen_socket_ >= 0) ::listen(listen_socket_, SOMAXCONN);
  loader_ = std::thread([this] {
    try {
      pool_.Get("");
      ready_ = true;
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(load_mu_);
      load_error_ = e.what();
    }
  });
  if (on_listening_) on_listening_(port_);
  http_->listen_after_bind();
  return true;
}

void HttpServer::Drain() {
  draining_ = true;
  pool_.Drain();
  // Streams still writing their last events would be cut by stop(): let them end (bounded).
  for (int i = 0; i < 600 && streams_ > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  http_->stop();
}

void HttpServer::Routes() {
  httplib::Server& s = *http_;
  s.set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_socket_ = sock;
  });
  s.new_task_queue = [n = opts_.threads] { return new httplib::ThreadPool((size_t)n); };
  // A streamed answer is many small writes: under Nagle's algorithm the first token's event waited for
  // the client's delayed ACK of the headers (about 40 ms on Linux) before it left.
  s.set_tcp_nodelay(true);
  s.set_payload_max_length(opts_.max_body_bytes);
  s.set_default_headers({{"Access-Control-Allow-Origin", "*"}});
  s.Options(R"(/.*)", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
    res.status = 204;
  });
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (opts_.api_key.empty() || req.method == "OPTIONS" || req.path.rfind("/v1/", 0) != 0)
      return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + opts_.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    SendError(res, ApiError(401, "authentication_error",
                            "a valid API key is required (Authorization: Bearer KEY)"));
    metrics_.Request(401);
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses httplib answers itself (unknown route, oversize body, unreadable request) in OpenAI's shape.
  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      SendError(res, ApiError(404, "not_found_error", "no route " + req.method + " " + req.path));
    else if (res.status == 413)
      SendError(res, ApiError(413, "invalid_request_error",
                              "the request body is over " + std::to_string(opts_.max_body_bytes) + " bytes"));
    else
      SendError(res, ApiError(res.status, res.status < 500 ? "invalid_request_error" : "server_error",
                              "the request could not be read (HTTP " + std::to_string(res.status) + ")"));
    metrics_.Request(res.status);
  });
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(ChatPageHtml(), "text/html; charset=utf-8");
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (ready_ && !draining_) {
      res.set_content(R"({"status":"ok"})", "application/json");
      return;
    }
    std::lock_guard<std::mutex> lock(load_mu_);
    SendError(res, ApiError(503, "server_error",
                            draining_             ? "the server is shutting down"
                            : load_error_.empty() ? "the model is loading"
                                                  : "the model failed to load: " + load_error_));
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    const ModelPool::Stats ps = pool_.stats();
    Metrics::Gauges g{ps.queued,
                      ps.running,
                      ps.loaded,
                      ps.loads,
                      ps.unloads,
                      ps.load_seconds,
                      ps.kv.kv_blocks_used,
                      ps.kv.kv_blocks,
                      ps.kv.prefix_hit_tokens,
                      ps.kv.prefix_query_tokens,
                      ps.kv.preemptions,
                      ps.kv.steps,
                      ps.kv.step_sequences};
    res.set_content(metrics_.Render(g), "text/plain; version=0.0.4");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json data = json::array();
    for (const std::string& name : pool_.names())
      data.push_back({{"id", name},
                      {"object", "model"},
                      {"created", (int64_t)std::time(nullptr)},
                      {"owned_by", "prism"}});
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  });
  for (bool chat : {false, true})
    s.Post(chat ? "/v1/chat/completions" : "/v1/completions",
           [this, chat](const httplib::Request& req, httplib::Response& res) { Generate(req, res, chat); });
  s.Post("/v1/embeddings",
         [this](const httplib::Request& req, httplib::Response& res) { Embeddings(req, res); });
}

void HttpServer::Embeddings(const httplib::Request& req, httplib::Response& res) {
  Answer(metrics_, res, [&] {
    if (draining_) throw ApiError(503, "server_error", "the server is shutting down");
    if (!ready_) throw ApiError(503, "server_error", "the model is loading");
    const EmbeddingRequest r = ParseEmbeddingRequest(req.body);
    std::shared_ptr<Engine> engine = pool_.Get(r.model);  // held: never unloaded while it embeds
    int64_t tokens = 0;
    const std::vector<std::vector<float>> vectors = engine->Embed(r, &tokens);
    json data = json::array();
    for (size_t i = 0; i < vectors.size(); ++i)
      data.push_back({{"object", "embedding"},
                      {"index", i},
                      {"embedding", r.base64 ? json(Base64Floats(vectors[i])) : json(vectors[i])}});
    res.set_content(json{{"object", "list"},
                         {"data", data},
                         {"model", engine->name()},
                         {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}
                        .dump(),
                    "application/json");
    metrics_.Request(200);
  });
}

void HttpServer::Generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  const auto arrived = std::chrono::steady_clock::now();
  Answer(metrics_, res, [&] {
    if (draining_) throw ApiError(503, "server_error", "the server is shutting down");
    if (!ready_) throw ApiError(503, "server_error", "the model is loading");
    auto st = std::make_shared<Response>();
    st->request = ParseServeRequest(req.body, chat);
    st->request.arrived = arrived;
    st->engine = pool_.Get(st->request.model);  // held until the response is sent: never unloaded meanwhile
    st->job = st->engine->Submit(st->request);
    st->id = NewId(chat ? "chatcmpl-" : "cmpl-");
    st->model = st->engine->name();
    st->created = (int64_t)std::time(nullptr);
    const int n = st->request.n;
    st->text.assign(n, "");
    st->finish.assign(n, "");
    st->logprobs.assign(n, {});
    st->offsets.assign(n, 0);
    st->role_sent.assign(n, false);
    const Tokenizer& tok = st->engine->model().tokenizer();
    if (!st->request.stream) {
      ChoiceEvent ev;
      while (!st->job->done()) {
        if (!st->job->Next(&ev, milliseconds(100))) continue;
        st->text[ev.index] += ev.text;
        for (TokenLogprob& lp : ev.logprobs) st->logprobs[ev.index].push_back(std::move(lp));
        if (!ev.finish_reason.empty()) st->finish[ev.index] = ev.finish_reason;
      }
      if (!st->job->error().empty()) throw ApiError(500, "server_error", st->job->error());
      res.set_content(Whole(*st, tok).dump(), "application/json");
      metrics_.Request(200);
      return;
    }
    // Server-sent events: a chunk per piece of text, the usage if asked for, then [DONE]. A client that
    // goes away cancels its request at once.
    res.set_header("Cache-Control", "no-cache");
    streams_++;
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, st, &tok](size_t, httplib::DataSink& sink) {
          auto send = [&](const std::string& data) {
            const std::string line = "data: " + data + "\n\n";
            return sink.write(line.data(), line.size());
          };
          ChoiceEvent ev;
          for (;;) {
            if (st->job->Next(&ev, milliseconds(50))) {
              if (send(Chunk(*st, tok, ev).dump())) return true;
              st->job->Cancel();
              return false;
            }
            if (st->job->done()) break;
            if (!sink.is_writable()) {
              st->job->Cancel();
              return false;
            }
          }
          if (!st->job->error().empty())
            send(ApiError(500, "server_error", st->job->error()).ToJson().dump());
          if (st->request.include_usage) {
            json usage = st->Head(st->request.chat ? "chat.completion.chunk" : "text_completion");
            usage["choices"] = json::array();
            usage["usage"] = Usage(*st->job);
            send(usage.dump());
          }
          send("[DONE]");
          sink.done();
          metrics_.Request(200);
          return true;
        },
        [this, st](bool success) {
          if (!success) st->job->Cancel();
          streams_--;
        });
  });
}

}  // namespace prism
