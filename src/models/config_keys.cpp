// Typed access to config.json keys and GGUF metadata, and the config readers every family shares.
#include "models/config_keys.h"

#include <cmath>

#include "ir/error.h"

namespace prism {

using nlohmann::json;

const json* JsonKeys::Find(const std::string& key) const {
  auto it = j_.find(key);
  return it == j_.end() || it->is_null() ? nullptr : &*it;
}

std::optional<int64_t> JsonKeys::OptInt(const std::string& key) const {
  const json* v = Find(key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer() ||
      (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
    throw Error(source_ + ": '" + key + "' must be an integer, got " + v->dump());
  return v->get<int64_t>();
}

int64_t JsonKeys::Int(const std::string& key) const {
  if (auto v = OptInt(key)) return *v;
  throw Error(source_ + ": missing required key '" + key + "'");
}

double JsonKeys::Double(const std::string& key, double fallback) const {
  const json* v = Find(key);
  if (!v) return fallback;
  if (!v->is_number()) throw Error(source_ + ": '" + key + "' must be a number, got " + v->dump());
  return v->get<double>();
}

bool JsonKeys::Bool(const std::string& key, bool fallback) const {
  const json* v = Find(key);
  if (!v) return fallback;
  if (!v->is_boolean()) throw Error(source_ + ": '" + key + "' must be true or false, got " + v->dump());
  return v->get<bool>();
}

std::string JsonKeys::String(const std::string& key, const std::string& fallback) const {
  const json* v = Find(key);
  if (!v) return fallback;
  if (!v->is_string()) throw Error(source_ + ": '" + key + "' must be a string, got " + v->dump());
  return v->get<std::string>();
}

std::vector<double> JsonKeys::Doubles(const std::string& key) const {
  const json* v = Find(key);
  if (!v) throw Error(source_ + ": missing required key '" + key + "'");
  std::vector<double> out;
  if (v->is_array())
    for (const json& x : *v)
      if (x.is_number()) out.push_back(x.get<double>());
  if (!v->is_array() || out.size() != v->size())
    throw Error(source_ + ": '" + key + "' must be an array of numbers, got " + v->dump().substr(0, 80));
  return out;
}

std::optional<int64_t> GgufKeys::OptInt(const std::string& key, bool prefixed) const {
  const std::string full = prefixed ? prefix_ + key : key;
  auto it = g_.Metadata().find(full);
  if (it == g_.Metadata().end()) return std::nullopt;
  if (!it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
    throw Error(g_.Source() + ": metadata '" + full + "' must be an integer");
  return it->get<int64_t>();
}

int64_t GgufKeys::Int(const std::string& key) const {
  if (auto v = OptInt(key)) return *v;
  throw Error(g_.Source() + ": missing metadata '" + prefix_ + key + "'");
}

double GgufKeys::Double(const std::string& key, double fallback) const {
  auto it = g_.Metadata().find(prefix_ + key);
  if (it == g_.Metadata().end()) return fallback;
  if (!it->is_number()) throw Error(g_.Source() + ": metadata '" + prefix_ + key + "' must be a number");
  return it->get<double>();
}

bool GgufKeys::HasTensor(const std::string& name) const {
  for (const GgufTensorInfo& info : g_.TensorInfos())
    if (info.name == name) return true;
  return false;
}

std::string CheckedActivation(const std::string& act, const std::string& source) {
  if (act == "silu" || act == "swish") return "silu";
  if (act == "gelu" || act == "gelu_new" || act == "gelu_pytorch_tanh") return act;
  throw Error(source + ": unsupported activation '" + act +
              "' (supported: silu, gelu, gelu_new, gelu_pytorch_tanh)");
}

void ReadTokenIds(const JsonKeys& keys, ModelConfig* c) {
  c->bos_token_id = keys.Int("bos_token_id", -1);
  const json* eos = keys.Find("eos_token_id");
  if (!eos) return;
  if (eos->is_array()) {
    for (const json& id : *eos) {
      if (!id.is_number_integer())
        throw Error(keys.source() + ": 'eos_token_id' entries must be integers, got " + id.dump());
      c->eos_token_ids.push_back(id.get<int64_t>());
    }
  } else {
    c->eos_token_ids.push_back(keys.Int("eos_token_id"));
  }
  if (!c->eos_token_ids.empty()) c->eos_token_id = c->eos_token_ids[0];
}

void ReadRope(const JsonKeys& keys, ModelConfig* c) {
  // transformers >= 5 writes rope_theta and the scaling keys together in a "rope_parameters" object;
  // earlier configs (most checkpoints on the Hub) have top-level rope_theta and rope_scaling.
  const std::string& source = keys.source();
  const json* params = keys.Find("rope_parameters");
  if (params && !params->is_object()) throw Error(source + ": 'rope_parameters' must be an object or null");
  c->rope_theta =
      keys.Double("rope_theta", params ? JsonKeys(*params, source).Double("rope_theta", 10000) : 10000);
  const json* scaling = keys.Find("rope_scaling");
  if (scaling && !scaling->is_object()) throw Error(source + ": 'rope_scaling' must be an object or null");
  if (!scaling) scaling = params;
  if (scaling == nullptr) return;
  ReadRopeScaling(JsonKeys(*scaling, source), keys, c);
}

void ReadRopeScaling(const JsonKeys& rs, const JsonKeys& config, ModelConfig* c) {
  const std::string& source = rs.source();
  const std::string type = rs.String("rope_type", rs.String("type", "default"));
  if (type == "default") return;
  if (type == "linear") {
    c->rope_linear_factor = rs.Double("factor", 0);
    if (c->rope_linear_factor <= 0) throw Error(source + ": rope_scaling factor must be positive");
  } else if (type == "llama3") {
    c->rope_factor = rs.Double("factor", 0);
    c->rope_low_freq_factor = rs.Double("low_freq_factor", 1);
    c->rope_high_freq_factor = rs.Double("high_freq_factor", 4);
    c->rope_original_max_position = rs.Int("original_max_position_embeddings", 8192);
    if (c->rope_factor <= 0) throw Error(source + ": rope_scaling factor must be positive");
  } else if (type == "longrope" || type == "su") {
    c->rope_short_factor = rs.Doubles("short_factor");
    c->rope_long_factor = rs.Doubles("long_factor");
    c->rope_original_max_position = rs.Int("original_max_position_embeddings",
                                           config.Int("original_max_position_embeddings", c->max_position));
    if (c->rope_original_max_position <= 0)
      throw Error(source + ": original_max_position_embeddings must be positive");
    // The attention factor the LongRoPE paper suggests, from the context extension's ratio.
    const double factor =
        rs.Double("factor", (double)c->max_position / (double)c->rope_original_max_position);
    c->rope_attention_factor = rs.Double(
        "attention_factor",
        factor <= 1 ? 1.0
                    : std::sqrt(1 + std::log(factor) / std::log((double)c->rope_original_max_position)));
    const size_t half = (size_t)(c->head_dim / 2);
    if (c->rope_short_factor.size() != half || c->rope_long_factor.size() != half)
      throw Error(source + ": longrope short_factor and long_factor need head_dim / 2 = " +
                  std::to_string(half) + " entries, got " + std::to_string(c->rope_short_factor.size()) +
                  " and " + std::to_string(c->rope_long_factor.size()));
  } else {
    throw Error(source + ": rope_scaling type '" + type +
                "' is not supported (supported: linear, llama3, longrope)");
  }
}

}  // namespace prism
