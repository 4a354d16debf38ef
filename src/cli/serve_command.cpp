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
    bool exact = false;
    std::string model, name, tokenizer, device = "cpu", prefill_device, host = "127.0.0.1", api_key, program;
    std::vector<std::string> models;  // NAME=PATH
    int port = 8080, threads = 0;
    int64_t ctx = 0;
    size_t max_queue = 64, max_body = 1 << 20;
    int parallel = 32;
    int64_t step_tokens = 256, kv_block = 16;
    double kv_memory_mb = 1024, search_budget = 0;
    double idle_unload = 0, memory_budget_mb = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("model", o->model, "model path or compiled artifact (default: the shipped stories260K)");
  cmd->add_option("--name", o->name, "the model's name in the API (default: the file or folder name)");
  cmd->add_option("--model", o->models, "another model, as NAME=PATH (repeatable; loaded on first use)");
  cmd->add_option(
         "--idle-unload", o->idle_unload,
         "seconds a model may stay idle before its memory is freed (0: never); the next request loads "
         "it again")
      ->capture_default_str();
  cmd->add_option(
         "--memory-budget", o->memory_budget_mb,
         "MiB of model files kept loaded at once; the least recently used idle model makes room (0: no "
         "budget)")
      ->capture_default_str();
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
  cmd->add_option("--parallel", o->parallel, "sequences decoded together in one step, at most")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--step-tokens", o->step_tokens,
                  "tokens in one step, at most (prompts longer than this are prefilled in chunks)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kv-memory", o->kv_memory_mb,
                  "MiB of KV cache per model (at most what --parallel full contexts need)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--search-budget", o->search_budget,
                  "seconds of schedule search for the batched step's kernels the tuning database lacks, at load")
      ->capture_default_str();
  cmd->add_option("--kv-block", o->kv_block, "tokens per KV cache block")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o->threads, "threads (default: all cores)");
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer file (llama2.c checkpoints)");
  AddDeviceOption(cmd, o->device);
  AddProgramOption(cmd, o->program);
  AddExactOption(cmd, o->exact);
  AddSplitDeviceOptions(cmd, o->device, o->prefill_device);
  return [o]() {
    std::vector<ModelSpec> models;
    if (!o->model.empty() || o->models.empty()) {
      const std::string path = o->model.empty() ? DefaultModelPath() : o->model;
      models.push_back({o->name.empty() ? std::filesystem::path(path).filename().string() : o->name, path});
    }
    for (const std::string& m : o->models) {
      const size_t eq = m.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == m.size())
        throw Error("--model " + m + ": expected NAME=PATH");
      models.push_back({m.substr(0, eq), m.substr(eq + 1)});
    }
    for (size_t i = 0; i < models.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (models[i].name == models[j].name) throw Error("two models are named '" + models[i].name + "'");
    ServeOptions so;
    so.host = o->host;
    so.port = o->port;
    so.api_key = o->api_key;
    so.max_body_bytes = o->max_body;
    PoolOptions po{o->idle_unload, (int64_t)(o->memory_budget_mb * 1024 * 1024)};
    HttpServer server(so, models, po, [o](const ModelSpec& m, Metrics* metrics) {
      LoadOptions lo;
      lo.tokenizer_path = o->tokenizer;
      lo.max_context = o->ctx;
      lo.threads = o->threads;
      lo.exact = o->exact;
      lo.device = o->device;
      lo.program = o->program;
      lo.prefill_device = o->prefill_device;
      lo.kv_block = o->kv_block;
      lo.kv_memory_bytes = (int64_t)(o->kv_memory_mb * 1024 * 1024);
      lo.kv_sequences = o->parallel;
      lo.search_budget = o->search_budget;
      if (IsEncoderModel(m.path)) return std::make_unique<Engine>(m.name, TextEncoder::Load(m.path, lo), metrics);
      EngineOptions eo{o->max_queue, {o->step_tokens, o->parallel}};
      return std::make_unique<Engine>(m.name, LanguageModel::Load(m.path, lo), eo, metrics);
    });
    server.OnListening([&](int port) {
      std::string names;
      for (const ModelSpec& m : models) names += (names.empty() ? "" : ", ") + m.name;
      std::fprintf(stderr, "prism serve: %s on http://%s:%d (loading; /health says when ready)\n",
                   names.c_str(), so.host.c_str(), port);
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
