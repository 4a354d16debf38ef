// The models a server offers by name: loaded on first use, unloaded when idle or over the memory budget.
#include "server/model_pool.h"

#include <filesystem>

#include "server/api_error.h"

namespace prism {
namespace {

using Clock = std::chrono::steady_clock;

int64_t BytesOnDisk(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    const auto n = fs::file_size(path, ec);
    return ec ? 0 : (int64_t)n;
  }
  int64_t total = 0;
  for (const auto& f : fs::recursive_directory_iterator(path, ec))
    if (f.is_regular_file(ec)) total += (int64_t)f.file_size(ec);
  return total;
}

}  // namespace

ModelPool::ModelPool(std::vector<ModelSpec> specs, PoolOptions opts, Loader load)
    : specs_(std::move(specs)), opts_(opts), load_(std::move(load)) {
  if (specs_.empty()) throw BadRequest("a server needs at least one model");
  for (const ModelSpec& s : specs_)
    entries_.push_back({s, BytesOnDisk(s.path), nullptr, false, Clock::now()});
  reaper_ = std::thread([this] { Reap(); });
}

ModelPool::~ModelPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  reaper_.join();
}

std::vector<std::string> ModelPool::names() const {
  std::vector<std::string> out;
  for (const ModelSpec& s : specs_) out.push_back(s.name);
  return out;
}

bool ModelPool::Idle(const Entry& e) {
  return e.engine && e.engine.use_count() == 1 && e.engine->queued() == 0 && e.engine->running() == 0;
}

void ModelPool::Unload(Entry& e) {
  e.engine.reset();  // its weights, programs and KV cache go with it
  stats_.unloads++;
}

std::shared_ptr<Engine> ModelPool::Get(const std::string& name) {
  std::unique_lock<std::mutex> lock(mu_);
  Entry* e = nullptr;
  for (Entry& x : entries_)
    if (x.spec.name == (name.empty() ? default_name() : name)) e = &x;
  if (!e)
    throw ApiError(404, "not_found_error",
                   "model '" + name + "' does not exist; /v1/models lists what this server has", "model");
  cv_.wait(lock, [&] { return !e->loading; });
  e->last_used = Clock::now();
  if (e->engine) return e->engine;
  // Within the budget: the least recently used idle models make room first.
  if (opts_.memory_budget_bytes > 0)
    for (;;) {
      int64_t used = e->bytes;
      Entry* lru = nullptr;
      for (Entry& x : entries_) {
        if (!x.engine) continue;
        used += x.bytes;
        if (Idle(x) && (!lru || x.last_used < lru->last_used)) lru = &x;
      }
      if (used <= opts_.memory_budget_bytes || !lru) break;  // over budget with every model busy: load anyway
      Unload(*lru);
    }
  e->loading = true;
  lock.unlock();
  std::shared_ptr<Engine> engine;
  std::string error;
  const auto t0 = Clock::now();
  try {
    engine = load_(e->spec);
  } catch (const std::exception& ex) {
    error = ex.what();
  }
  lock.lock();
  e->loading = false;
  e->engine = engine;
  e->last_used = Clock::now();
  if (engine) {
    stats_.loads++;
    stats_.load_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  cv_.notify_all();
  if (!engine) throw ApiError(503, "server_error", "model '" + e->spec.name + "' failed to load: " + error);
  return engine;
}

bool ModelPool::Loaded(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Entry& e : entries_)
    if (e.spec.name == name) return (bool)e.engine;
  return false;
}

ModelPool::Stats ModelPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  for (const Entry& e : entries_)
    if (e.engine) {
      s.loaded++;
      s.queued += (int64_t)e.engine->queued();
      s.running += (int64_t)e.engine->running();
      const EngineStats k = e.engine->stats();
      s.kv.kv_blocks_used += k.kv_blocks_used;
      s.kv.kv_blocks += k.kv_blocks;
      s.kv.prefix_hit_tokens += k.prefix_hit_tokens;
      s.kv.prefix_query_tokens += k.prefix_query_tokens;
      s.kv.preemptions += k.preemptions;
      s.kv.steps += k.steps;
      s.kv.step_sequences += k.step_sequences;
    }
  return s;
}

void ModelPool::Drain() {
  std::vector<std::shared_ptr<Engine>> engines;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Entry& e : entries_)
      if (e.engine) engines.push_back(e.engine);
  }
  for (auto& engine : engines) engine->Drain();
}

void ModelPool::Reap() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    if (opts_.idle_unload_seconds <= 0) continue;
    const auto now = Clock::now();
    for (Entry& e : entries_) {
      if (e.engine && !Idle(e)) e.last_used = now;  // idle time counts from the last request's end
      if (Idle(e) && std::chrono::duration<double>(now - e.last_used).count() >= opts_.idle_unload_seconds)
        Unload(e);
    }
  }
}

}  // namespace prism
