// Typed access to config.json keys and GGUF metadata, with one-line errors naming the file and key;
// and the config readers every family shares (activation, token ids, rope scaling).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/formats/gguf.h"
#include "io/formats/model_config.h"

namespace prism {

// One JSON object's keys. JSON null counts as absent (HF configs write "head_dim": null and the like).
class JsonKeys {
 public:
  JsonKeys(const nlohmann::json& j, const std::string& source) : j_(j), source_(source) {}
  const nlohmann::json& object() const { return j_; }
  const std::string& source() const { return source_; }
  const nlohmann::json* Find(const std::string& key) const;
  bool Has(const std::string& key) const { return Find(key) != nullptr; }
  std::optional<int64_t> OptInt(const std::string& key) const;
  int64_t Int(const std::string& key) const;  // required
  int64_t Int(const std::string& key, int64_t fallback) const { return OptInt(key).value_or(fallback); }
  double Double(const std::string& key, double fallback) const;
  bool Bool(const std::string& key, bool fallback) const;
  std::string String(const std::string& key, const std::string& fallback) const;
  std::vector<double> Doubles(const std::string& key) const;  // a required array of numbers

 private:
  const nlohmann::json& j_;
  const std::string& source_;
};

// GGUF metadata under the architecture's prefix ("llama." for "attention.head_count").
class GgufKeys {
 public:
  explicit GgufKeys(const GgufFile& g) : g_(g), prefix_(g.Architecture() + ".") {}
  const GgufFile& file() const { return g_; }
  std::optional<int64_t> OptInt(const std::string& key, bool prefixed = true) const;
  int64_t Int(const std::string& key) const;  // required, prefixed
  double Double(const std::string& key, double fallback) const;
  bool HasTensor(const std::string& name) const;

 private:
  const GgufFile& g_;
  std::string prefix_;
};

// "silu" (also for "swish"), "gelu", "gelu_new", "gelu_pytorch_tanh"; anything else throws.
std::string CheckedActivation(const std::string& act, const std::string& source);
// bos_token_id, eos_token_id (an integer or a list) into c.
void ReadTokenIds(const JsonKeys& keys, ModelConfig* c);
// rope_theta (top level or in transformers 5's rope_parameters) and rope scaling into c.
void ReadRope(const JsonKeys& keys, ModelConfig* c);
// One rope-scaling object ("rope_type" or "type": default, llama3, linear, longrope/su) into c; `config`
// is the whole config.json (LongRoPE's original_max_position_embeddings may sit at its top level).
void ReadRopeScaling(const JsonKeys& scaling, const JsonKeys& config, ModelConfig* c);

}  // namespace prism
