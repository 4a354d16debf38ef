// `prism serve`: an OpenAI-compatible HTTP endpoint for one model, until SIGINT or SIGTERM drains it.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "ir/error.h"
#include "server/http_server.h"

namespace prism::cli {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

}  // namespace

Runner AddServeCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "serve", "Serve a model over OpenAI's HTTP API (/v1/completions, /v1/chat/completions)");
  struct Opts {
    std::string model, name, tokenizer, device = "cpu", host = "127.0.0.1", api_key;
    int port = 8080, threads = 0;
    int64_t ctx = 0;
    size_t max_queue = 64, max_body = 1 << 20;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("model", o->model, "model path or compiled artifact (default: the shipped stories260K)");
  cmd->add_option("--name", o->name, "the model's name in the API (default: the file or folder name)");
  cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "port (0: any free one, printed)")->capture_default_str();
  cmd->add_option("--api-key", o->api_key,
                  "require 'Authorization: Bearer KEY' on /v1/ (default: $PRISM_API_KEY)")
      ->envname("PRISM_API_KEY");
  cmd->add_option("--max-queue", o->max_queue, "requests waiting at most; more get 429")
      ->capture_default_str();
  cmd->add_option("--max-body", o->max_body, "largest request body in bytes; larger get 413")
      ->capture_default_str();
  cmd->add_option("--ctx", o->ctx, "context size in tokens");
  cmd->add_option("--threads", o->threads, "threads (default: all cores)");
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer file (llama2.c checkpoints)");
  AddDeviceOption(cmd, o->device);
  return [o]() {
    const std::string path = o->model.empty() ? DefaultModelPath() : o->model;
    ServeOptions so;
    so.model_name = o->name.empty() ? std::filesystem::path(path).filename().string() : o->name;
    so.host = o->host;
    so.port = o->port;
    so.api_key = o->api_key;
    so.max_body_bytes = o->max_body;
    HttpServer server(so, [o, path, name = so.model_name](Metrics* metrics) {
      LoadOptions lo{o->tokenizer, o->ctx, o->threads};
      lo.device = o->device;
      return std::make_unique<Engine>(name, LanguageModel::Load(path, lo), EngineOptions{o->max_queue},
                                      metrics);
    });
    server.OnListening([&](int port) {
      std::fprintf(stderr, "prism serve: %s on http://%s:%d (loading; /health says when ready)\n",
                   so.model_name.c_str(), so.host.c_str(), port);
    });
    std::signal(SIGINT, OnSignal);
    std::signal(SIGTERM, OnSignal);
    std::atomic<bool> done{false};
    std::thread watcher([&] {  // a signal drains: accepted requests finish, new ones get 503
      while (!done && !g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (g_stop) {
        std::fprintf(stderr, "prism serve: draining\n");
        server.Drain();
      }
    });
    std::string why;
    const bool ok = server.Listen(&why);
    done = true;
    watcher.join();
    if (!ok) throw Error(why);
    return 0;
  };
}

}  // namespace prism::cli
